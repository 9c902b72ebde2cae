/**
 * The default payload limit, the default of the database setting
 * drainer.max_payload_bytes (1 MiB).
 */
export declare const DEFAULT_MAX_PAYLOAD_BYTES: number;
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
 * Then checks the size: more than maxBytes bytes of UTF-8 is a
 * PayloadTooLargeError. The database measures the text of the stored jsonb,
 * which adds a space after every ':' and ',', so it may still refuse a
 * payload slightly under maxBytes with the same error.
 */
export declare function serializePayload(payload: unknown, maxBytes?: number): string;
