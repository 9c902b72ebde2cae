"use strict";
// Error classes of @drainer/client. Every error this library raises itself is
// a DrainerError; errors of the database (for example SQLSTATE 23505, the
// same tuple enqueued with a different payload) are node-postgres errors,
// passed through unchanged so that callers can test `err.code`.
//
// No message ever contains a payload value: errors name the field or the
// path inside the payload, and what is wrong with it.
Object.defineProperty(exports, "__esModule", { value: true });
exports.UsageError = exports.ConnectionClosedError = exports.WaitTimeoutError = exports.PayloadTooLargeError = exports.PayloadError = exports.InvalidTupleError = exports.DrainerError = void 0;
/** Base class of every error raised by @drainer/client itself. */
class DrainerError extends Error {
    constructor(message, options) {
        super(message, options);
        this.name = new.target.name;
    }
}
exports.DrainerError = DrainerError;
/**
 * A tuple that the enqueue rules refuse (docs/reference.md §1): agentRunId, stepId
 * and toolName must be non-empty strings; every field must be valid UTF-8
 * (no lone surrogate), contain no NUL and be at most 1024 bytes in UTF-8;
 * businessScope may be empty. Raised before the database is touched.
 */
class InvalidTupleError extends DrainerError {
    /** The first invalid field. */
    field;
    /** Every invalid field, in tuple order, with what is wrong. */
    problems;
    constructor(problems) {
        const first = problems[0];
        if (first === undefined) {
            throw new RangeError('InvalidTupleError needs at least one problem');
        }
        super('invalid intent tuple: ' + problems.map((p) => `${p.field} ${p.problem}`).join('; '));
        this.field = first.field;
        this.problems = Object.freeze(problems.slice());
    }
}
exports.InvalidTupleError = InvalidTupleError;
/**
 * A payload that cannot be stored faithfully as JSON: a BigInt, a function,
 * a symbol, a cycle, a non-finite number, undefined at the top level or in
 * an array, a Map or Set, a string with a lone surrogate or a NUL character.
 * `path` locates the offending value (`payload`, `payload.items[2]`, ...).
 */
class PayloadError extends DrainerError {
    path;
    constructor(path, problem, options) {
        super(`${path}: ${problem}`, options);
        this.path = path;
    }
}
exports.PayloadError = PayloadError;
/**
 * A payload over the size limit: refused by the library before the
 * database is touched (limit `maxPayloadBytes`, default 1 MiB), or by
 * drainer.enqueue itself (setting drainer.max_payload_bytes, SQLSTATE
 * 54000; the database error is the `cause`). `code` is '54000' in both cases.
 */
class PayloadTooLargeError extends PayloadError {
    code = '54000';
    /** The payload's size in bytes, as measured by whoever refused it. */
    bytes;
    /** The limit in bytes. */
    limit;
    constructor(bytes, limit, message, options) {
        super('payload', message, options);
        this.bytes = bytes;
        this.limit = limit;
    }
}
exports.PayloadTooLargeError = PayloadTooLargeError;
/** waitFor gave up: the intent was neither terminal nor parked in time. */
class WaitTimeoutError extends DrainerError {
    key;
    timeoutMs;
    /** The status last read, or null when no row with this key was visible. */
    lastStatus;
    constructor(key, timeoutMs, lastStatus) {
        super(lastStatus === null
            ? `waitFor ${key}: no row with this key became visible within ${timeoutMs} ms ` +
                '(was the enqueueing transaction committed, and is the schema right?)'
            : `waitFor ${key}: still ${lastStatus} after ${timeoutMs} ms`);
        this.key = key;
        this.timeoutMs = timeoutMs;
        this.lastStatus = lastStatus;
    }
}
exports.WaitTimeoutError = WaitTimeoutError;
/**
 * The client (or pool) was closed, or its connection was lost. An enqueue
 * inside a transaction was rolled back with it; an enqueue outside one may
 * or may not have committed. Either way, enqueueing the same tuple and
 * payload again is safe: it answers the existing key with created = false.
 */
class ConnectionClosedError extends DrainerError {
    constructor(operation, cause) {
        const why = cause instanceof Error ? cause.message : String(cause);
        super(`${operation}: the database connection is closed (${why})`, { cause });
    }
}
exports.ConnectionClosedError = ConnectionClosedError;
/**
 * The library was used in a way that cannot work: an invalid option, a
 * wrapped tool called outside withAgentStep or outside a transaction,
 * waitFor inside a transaction.
 */
class UsageError extends DrainerError {
}
exports.UsageError = UsageError;
