/**
 * The default payload limit, the default of the database setting
 * drainer.max_payload_bytes (1 MiB).
 */
export declare const DEFAULT_MAX_PAYLOAD_BYTES: number;
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
export declare class JSONString {
    readonly value: string;
    constructor(value: string);
    /** The string itself, as JSON.stringify (and the payload's serialisation) writes it. */
    toJSON(): string;
}
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
export declare function serializePayload(payload: unknown, maxBytes?: number): string;
