/** The four fields of an intent tuple, as named in TypeScript. */
export type TupleField = 'agentRunId' | 'stepId' | 'toolName' | 'businessScope';
/** Base class of every error raised by @drainer/client itself. */
export declare class DrainerError extends Error {
    constructor(message: string, options?: {
        cause?: unknown;
    });
}
/** One problem found in a tuple. */
export interface TupleProblem {
    field: TupleField;
    problem: string;
}
/**
 * A tuple that the enqueue rules refuse (docs/reference.md §1): agentRunId, stepId
 * and toolName must be non-empty strings; every field must be valid UTF-8
 * (no lone surrogate), contain no NUL and be at most 1024 bytes in UTF-8;
 * businessScope may be empty. Raised before the database is touched.
 */
export declare class InvalidTupleError extends DrainerError {
    /** The first invalid field. */
    readonly field: TupleField;
    /** Every invalid field, in tuple order, with what is wrong. */
    readonly problems: readonly TupleProblem[];
    constructor(problems: TupleProblem[]);
}
/**
 * A payload that cannot be stored faithfully as JSON: a BigInt, a function,
 * a symbol, a cycle, a non-finite number, undefined at the top level or in
 * an array, a Map or Set, a string with a lone surrogate or a NUL character.
 * `path` locates the offending value (`payload`, `payload.items[2]`, ...).
 */
export declare class PayloadError extends DrainerError {
    readonly path: string;
    constructor(path: string, problem: string, options?: {
        cause?: unknown;
    });
}
/**
 * A payload over the size limit: refused by the library before the
 * database is touched (limit `maxPayloadBytes`, default 1 MiB), or by
 * drainer.enqueue itself (setting drainer.max_payload_bytes, SQLSTATE
 * 54000; the database error is the `cause`). `code` is '54000' in both cases.
 */
export declare class PayloadTooLargeError extends PayloadError {
    readonly code = "54000";
    /** The payload's size in bytes, as measured by whoever refused it. */
    readonly bytes: number;
    /** The limit in bytes. */
    readonly limit: number;
    constructor(bytes: number, limit: number, message: string, options?: {
        cause?: unknown;
    });
}
/** waitFor gave up: the intent was neither terminal nor parked in time. */
export declare class WaitTimeoutError extends DrainerError {
    readonly key: string;
    readonly timeoutMs: number;
    /** The status last read, or null when no row with this key was visible. */
    readonly lastStatus: string | null;
    constructor(key: string, timeoutMs: number, lastStatus: string | null);
}
/**
 * The client (or pool) was closed, or its connection was lost. An enqueue
 * inside a transaction was rolled back with it; an enqueue outside one may
 * or may not have committed. Either way, enqueueing the same tuple and
 * payload again is safe: it answers the existing key with created = false.
 */
export declare class ConnectionClosedError extends DrainerError {
    constructor(operation: string, cause: unknown);
}
/**
 * The library was used in a way that cannot work: an invalid option, a
 * wrapped tool called outside withAgentStep or outside a transaction,
 * waitFor inside a transaction.
 */
export declare class UsageError extends DrainerError {
}
