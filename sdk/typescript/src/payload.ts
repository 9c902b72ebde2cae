// Payload serialisation: the JSON text sent to drainer.enqueue, or a
// PayloadError naming where the payload cannot be represented faithfully.

import { Buffer } from 'node:buffer';
import { types } from 'node:util';

import { PayloadError, PayloadTooLargeError } from './errors.js';
import { describeType, loneSurrogateIndex } from './key.js';

/**
 * The default payload limit, the default of the database setting
 * drainer.max_payload_bytes (1 MiB).
 */
export const DEFAULT_MAX_PAYLOAD_BYTES = 1 << 20;

/**
 * A payload that is deliberately a JSON string value.
 *
 * enqueue refuses a string payload, because a string there is almost always
 * JSON.stringify(obj) passed by mistake, which would be stored as one JSON
 * string instead of the object. When the provider really expects a JSON
 * string as the whole body, wrap it:
 *
 *     await enqueue(client, tuple, new JSONString('hello')); // body: "hello"
 *
 * `value` is the string itself, not JSON text (`new JSONString('{"a":1}')`
 * is the string `{"a":1}`, stored as `"{\"a\":1}"`). Inside a payload it is
 * the same as the plain string; JSON.stringify writes it as that string.
 */
export class JSONString {
  readonly value: string;

  constructor(value: string) {
    if (typeof value !== 'string') {
      throw new TypeError(`JSONString holds a string, not ${describeType(value)}`);
    }
    this.value = value;
    Object.freeze(this);
  }

  /** The string itself, as JSON.stringify (and the payload's serialisation) writes it. */
  toJSON(): string {
    return this.value;
  }
}

const STRING_PAYLOAD =
  'is a string: pass the object itself (an object, an array, ...), not JSON.stringify(obj), which would be ' +
  'stored as one JSON string instead of the object (JSON text you received: JSON.parse(text)); to send a JSON ' +
  'string on purpose, wrap it: new JSONString(value)';

/**
 * Serialises a payload to compact JSON, as JSON.stringify does (toJSON is
 * honoured, so a Date becomes its toISOString() text,
 * YYYY-MM-DDTHH:MM:SS.sssZ in UTC; object properties whose value is
 * undefined are omitted), but refuses what JSON.stringify would drop,
 * change or choke on: BigInt, functions, symbols, cycles, NaN and
 * ±Infinity, an invalid Date (JSON.stringify would write null), undefined
 * at the top level or in an array, Map, Set, WeakMap, WeakSet, and strings
 * (values or keys) with a lone surrogate or a NUL character, which Postgres
 * jsonb cannot store.
 *
 * The payload itself may not be a string: that is nearly always
 * JSON.stringify(obj) passed by mistake, which would store one JSON string
 * instead of the object. PayloadError says so; a deliberate JSON string
 * payload is a JSONString.
 *
 * Then checks the size: more than maxBytes bytes of UTF-8 is a
 * PayloadTooLargeError. The database measures the text of the stored jsonb,
 * which adds a space after every ':' and ',', so it may still refuse a
 * payload slightly under maxBytes with the same error.
 */
export function serializePayload(payload: unknown, maxBytes: number = DEFAULT_MAX_PAYLOAD_BYTES): string {
  if (typeof payload === 'string' || payload instanceof String) {
    throw new PayloadError('payload', STRING_PAYLOAD);
  }
  let text: string;
  try {
    text = write(payload, 'payload', '', new Set<object>());
  } catch (err) {
    if (err instanceof PayloadError) throw err;
    if (err instanceof RangeError) {
      throw new PayloadError('payload', 'is nested too deeply to serialise', { cause: err });
    }
    throw new PayloadError('payload', `cannot be serialised: ${err instanceof Error ? err.message : String(err)}`, {
      cause: err,
    });
  }
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes > maxBytes) {
    throw new PayloadTooLargeError(
      bytes,
      maxBytes,
      `is ${bytes} bytes as JSON, more than the limit of ${maxBytes} (option maxPayloadBytes; the database's is the setting drainer.max_payload_bytes)`,
    );
  }
  return text;
}

function write(input: unknown, path: string, key: string, ancestors: Set<object>): string {
  let value = input;
  if (types.isDate(value) && Number.isNaN(Date.prototype.getTime.call(value))) {
    throw new PayloadError(path, 'is an invalid Date (its time is NaN): it has no ISO text, and JSON.stringify would write null');
  }
  if (value !== null && (typeof value === 'object' || typeof value === 'bigint')) {
    const toJSON = (value as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === 'function') {
      value = toJSON.call(value, key);
    }
  }
  if (value instanceof Number) value = Number(value);
  else if (value instanceof String) value = String(value);
  else if (value instanceof Boolean) value = value.valueOf();

  switch (typeof value) {
    case 'string':
      return writeString(value, path, 'string');
    case 'number':
      if (!Number.isFinite(value)) {
        throw new PayloadError(path, `${value} is not representable in JSON (JSON.stringify would write null)`);
      }
      return JSON.stringify(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'bigint':
      throw new PayloadError(path, 'a BigInt is not JSON-serialisable (convert it to a string or a number first)');
    case 'function':
      throw new PayloadError(path, 'a function is not JSON-serialisable');
    case 'symbol':
      throw new PayloadError(path, 'a symbol is not JSON-serialisable');
    case 'undefined':
      throw new PayloadError(path, 'undefined is not JSON-serialisable');
  }
  if (value === null) {
    return 'null';
  }
  const obj = value as object;
  if (obj instanceof Map || obj instanceof Set || obj instanceof WeakMap || obj instanceof WeakSet) {
    throw new PayloadError(path, `${describeType(obj)} is not JSON-serialisable (JSON.stringify would write {}); convert it first`);
  }
  if (ancestors.has(obj)) {
    throw new PayloadError(path, 'is a cycle: the value contains itself');
  }
  ancestors.add(obj);
  let out: string;
  if (Array.isArray(obj)) {
    const parts: string[] = [];
    for (let i = 0; i < obj.length; i++) {
      parts.push(write(obj[i], `${path}[${i}]`, String(i), ancestors));
    }
    out = '[' + parts.join(',') + ']';
  } else {
    const parts: string[] = [];
    for (const k of Object.keys(obj)) {
      const v = (obj as Record<string, unknown>)[k];
      const p = path + propertyPath(k);
      if (v === undefined) {
        continue; // omitted, as JSON.stringify does
      }
      parts.push(writeString(k, p, 'key') + ':' + write(v, p, k, ancestors));
    }
    out = '{' + parts.join(',') + '}';
  }
  ancestors.delete(obj);
  return out;
}

function writeString(s: string, path: string, what: 'string' | 'key'): string {
  const surrogate = loneSurrogateIndex(s);
  if (surrogate >= 0) {
    throw new PayloadError(path, `${what} is not valid UTF-8: lone surrogate at index ${surrogate}`);
  }
  const nul = s.indexOf('\u0000');
  if (nul >= 0) {
    throw new PayloadError(path, `${what} contains a NUL character at index ${nul}, which Postgres jsonb cannot store`);
  }
  return JSON.stringify(s);
}

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

function propertyPath(k: string): string {
  if (IDENTIFIER.test(k)) return '.' + k;
  const shown = k.length > 64 ? k.slice(0, 64) + '…' : k;
  return '[' + JSON.stringify(shown) + ']';
}
