"use strict";
// enqueue, result and waitFor: the producer side of drainer over
// node-postgres, through the SQL functions of docs/reference.md §2.
Object.defineProperty(exports, "__esModule", { value: true });
exports.PARKED_STATUSES = exports.TERMINAL_STATUSES = exports.DEFAULT_SCHEMA = void 0;
exports.isTerminal = isTerminal;
exports.isParked = isParked;
exports.enqueue = enqueue;
exports.result = result;
exports.waitFor = waitFor;
exports.quoteSchema = quoteSchema;
exports.transactionStatus = transactionStatus;
const node_buffer_1 = require("node:buffer");
const node_perf_hooks_1 = require("node:perf_hooks");
const promises_1 = require("node:timers/promises");
const errors_js_1 = require("./errors.js");
const key_js_1 = require("./key.js");
const payload_js_1 = require("./payload.js");
/** The schema drainer lives in unless `drainer migrate --schema` said otherwise. */
exports.DEFAULT_SCHEMA = 'drainer';
/** Statuses that never change again. */
exports.TERMINAL_STATUSES = Object.freeze(['succeeded', 'failed', 'compensated', 'cancelled']);
/** Statuses that wait for a human (`drainer resolve`). */
exports.PARKED_STATUSES = Object.freeze(['outcome_unknown', 'compensation_failed']);
/** Whether a status is terminal (succeeded, failed, compensated, cancelled). */
function isTerminal(status) {
    return exports.TERMINAL_STATUSES.includes(status);
}
/** Whether a status is parked until a human resolves it (outcome_unknown, compensation_failed). */
function isParked(status) {
    return exports.PARKED_STATUSES.includes(status);
}
/**
 * Records an intent, idempotently, by calling drainer.enqueue on `client`.
 * Run it on the client that runs your transaction and it commits (or rolls
 * back) with your own writes.
 *
 * Same tuple and same payload as an existing intent: the existing key with
 * `created: false`. Same tuple, different payload: node-postgres'
 * DatabaseError with `code === '23505'` and a message naming the key (your
 * transaction is then aborted: roll it back). The tuple and payload are
 * checked before the database is touched (InvalidTupleError, PayloadError,
 * PayloadTooLargeError); a closed client raises ConnectionClosedError.
 * Under REPEATABLE READ or SERIALIZABLE a concurrent enqueue of the same
 * tuple can raise `40001`: retry the transaction.
 */
async function enqueue(client, tuple, payload, options = {}) {
    (0, key_js_1.validateTuple)(tuple);
    const maxBytes = options.maxPayloadBytes ?? payload_js_1.DEFAULT_MAX_PAYLOAD_BYTES;
    if (!Number.isSafeInteger(maxBytes) || maxBytes <= 0) {
        throw new errors_js_1.UsageError('enqueue: maxPayloadBytes must be a positive integer');
    }
    const json = (0, payload_js_1.serializePayload)(payload, maxBytes);
    const schema = quoteSchema(options.schema);
    const values = [tuple.agentRunId, tuple.stepId, tuple.toolName, tuple.businessScope, json];
    let call = `${schema}.enqueue($1::text, $2::text, $3::text, $4::text, $5::jsonb)`;
    if (options.traceparent !== undefined) {
        if (typeof options.traceparent !== 'string' || /[^\x20-\x7e]/.test(options.traceparent)) {
            throw new errors_js_1.UsageError('enqueue: traceparent must be a string of printable ASCII');
        }
        values.push(options.traceparent);
        call = `${schema}.enqueue($1::text, $2::text, $3::text, $4::text, $5::jsonb, $6::text)`;
    }
    const res = await run('enqueue', client, `SELECT e.key, e.created FROM ${call} AS e`, values);
    const row = res.rows[0];
    if (row === undefined || typeof row.key !== 'string') {
        throw new errors_js_1.UsageError(`enqueue: ${schema}.enqueue returned no key: is the schema migrated by drainer migrate?`);
    }
    return { key: row.key, created: toBool(row.created) };
}
/**
 * Reads the outcome of an intent through drainer.result: its status, the
 * provider's response and the last error, or null when no row with this key
 * is visible (not committed yet, or unknown). Pruned rows answer their final
 * status with a null response.
 */
async function result(client, key, options = {}) {
    requireKey('result', key);
    const schema = quoteSchema(options.schema);
    const res = await run('result', client, `SELECT r.status, r.response::text AS response, r.last_error FROM ${schema}.result($1::text) AS r`, [key]);
    const row = res.rows[0];
    if (row === undefined) {
        return null;
    }
    return {
        status: row.status,
        // Read as text and parsed here, whatever type parsers the client has.
        response: row.response === null ? null : JSON.parse(row.response),
        lastError: row.last_error,
    };
}
/**
 * Waits until the intent is terminal (succeeded, failed, compensated,
 * cancelled) or parked (outcome_unknown, compensation_failed) and returns
 * its result; WaitTimeoutError after `timeoutMs` (default 30 s).
 *
 * The schema sends no notification when a row's outcome changes (its
 * NOTIFY channel announces new rows to the daemon), so waitFor polls
 * drainer.result: first after `minPollMs` (50), the delay doubling up to
 * `maxPollMs` (1000), and a last read begun at or after the deadline
 * (also when an earlier read overran it). Each read is one indexed lookup
 * by key.
 *
 * Call it outside any transaction (after committing the one that
 * enqueued): the daemon cannot see an uncommitted intent, and a
 * REPEATABLE READ snapshot would never see the outcome change. A client
 * inside a transaction block is refused with UsageError.
 */
async function waitFor(client, key, options = {}) {
    requireKey('waitFor', key);
    const timeoutMs = options.timeoutMs ?? 30_000;
    const minPoll = options.minPollMs ?? 50;
    const maxPoll = options.maxPollMs ?? 1000;
    for (const [name, v] of [
        ['timeoutMs', timeoutMs],
        ['minPollMs', minPoll],
        ['maxPollMs', maxPoll],
    ]) {
        if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
            throw new errors_js_1.UsageError(`waitFor: ${name} must be a finite number of milliseconds, at least 0`);
        }
    }
    if (minPoll <= 0 || maxPoll < minPoll) {
        throw new errors_js_1.UsageError('waitFor: need 0 < minPollMs <= maxPollMs');
    }
    const tx = transactionStatus(client);
    if (tx === 'T' || tx === 'E') {
        throw new errors_js_1.UsageError(`waitFor ${key}: the client is inside a transaction; commit the transaction that enqueued first ` +
            '(the daemon cannot see an uncommitted intent), then wait outside any transaction');
    }
    const deadline = node_perf_hooks_1.performance.now() + timeoutMs;
    let delay = minPoll;
    for (;;) {
        // The timeout is given only after a read begun at or after the
        // deadline: a read that began earlier and overran it (a slow server)
        // is not the last look.
        const began = node_perf_hooks_1.performance.now();
        const r = await result(client, key, options);
        if (r !== null && (isTerminal(r.status) || isParked(r.status))) {
            return r;
        }
        if (began >= deadline) {
            throw new errors_js_1.WaitTimeoutError(key, timeoutMs, r === null ? null : r.status);
        }
        await (0, promises_1.setTimeout)(Math.max(0, Math.min(delay, deadline - node_perf_hooks_1.performance.now())));
        delay = Math.min(delay * 2, maxPoll);
    }
}
/**
 * Quotes a schema name as an SQL identifier ("..." with inner quotes
 * doubled), after checking it is a possible Postgres name: a non-empty
 * string without NUL, at most 63 bytes. Quoted names are case-sensitive:
 * `drainer migrate` creates lower-case ones.
 */
function quoteSchema(schema) {
    const name = schema ?? exports.DEFAULT_SCHEMA;
    if (typeof name !== 'string' || name === '' || name.includes('\u0000') || node_buffer_1.Buffer.byteLength(name, 'utf8') > 63) {
        throw new errors_js_1.UsageError('schema must be a non-empty name without NUL, at most 63 bytes (the schema of drainer migrate)');
    }
    return '"' + name.replace(/"/g, '""') + '"';
}
/** The client's transaction status ('I', 'T', 'E'), or undefined when it cannot tell (a Pool). */
function transactionStatus(client) {
    if (typeof client.getTransactionStatus !== 'function') {
        return undefined;
    }
    const s = client.getTransactionStatus();
    return typeof s === 'string' ? s : undefined;
}
function requireKey(op, key) {
    if (typeof key !== 'string' || key === '') {
        throw new errors_js_1.UsageError(`${op}: key must be a non-empty string`);
    }
}
function toBool(v) {
    return v === true || v === 't' || v === 'true';
}
const PAYLOAD_LIMIT = /payload is (\d+) bytes, more than the limit of (\d+)/;
// Messages node-postgres (Client and Pool) gives when the connection is gone.
const CLOSED_MESSAGES = new Set([
    'Client was closed and is not queryable',
    'Client has encountered a connection error and is not queryable',
    'Connection terminated',
    'Connection terminated unexpectedly',
    'Cannot use a pool after calling end on the pool',
]);
const CLOSED_CODES = new Set(['ECONNRESET', 'EPIPE', '57P01', '57P02', '57P03']);
async function run(op, client, text, values) {
    if (client === null || typeof client !== 'object' || typeof client.query !== 'function') {
        throw new errors_js_1.UsageError(`${op}: client must be a node-postgres Client, PoolClient or Pool`);
    }
    try {
        return await client.query(text, values);
    }
    catch (err) {
        throw translate(op, err);
    }
}
function translate(op, err) {
    if (!(err instanceof Error)) {
        return err;
    }
    const code = err.code;
    if (code === '54000') {
        const m = PAYLOAD_LIMIT.exec(err.message);
        if (m !== null) {
            return new errors_js_1.PayloadTooLargeError(Number(m[1]), Number(m[2]), `is ${m[1]} bytes as stored jsonb, more than the database's limit of ${m[2]} (setting drainer.max_payload_bytes)`, { cause: err });
        }
    }
    if ((typeof code === 'string' && CLOSED_CODES.has(code)) || CLOSED_MESSAGES.has(err.message)) {
        return new errors_js_1.ConnectionClosedError(op, err);
    }
    return err;
}
