import { type Tuple } from './key.js';
/** The schema drainer lives in unless `drainer migrate --schema` said otherwise. */
export declare const DEFAULT_SCHEMA = "drainer";
/**
 * What enqueue, result and waitFor need of a database handle: a
 * node-postgres `Client`, a `PoolClient` (from `pool.connect()`) or a
 * `Pool`. Only a client can run the enqueue in your transaction: a `Pool`
 * runs each statement on whichever connection is free, so
 * `enqueue(pool, …)` commits the intent on its own.
 */
export interface Queryable {
    query(text: string, values?: unknown[]): Promise<{
        rows: unknown[];
    }>;
    /** node-postgres Client and PoolClient (not Pool): 'I' idle, 'T' in a transaction, 'E' in a failed transaction. */
    getTransactionStatus?(): string | null;
}
/** Statuses of an outbox row (docs/reference.md §2). */
export type Status = 'pending' | 'in_flight' | 'succeeded' | 'failed' | 'outcome_unknown' | 'compensated' | 'compensation_failed' | 'cancelled';
/** Statuses that never change again. */
export declare const TERMINAL_STATUSES: readonly Status[];
/** Statuses that wait for a human (`drainer resolve`). */
export declare const PARKED_STATUSES: readonly Status[];
/** Whether a status is terminal (succeeded, failed, compensated, cancelled). */
export declare function isTerminal(status: string): boolean;
/** Whether a status is parked until a human resolves it (outcome_unknown, compensation_failed). */
export declare function isParked(status: string): boolean;
/** The outcome of an intent as far as it is known, from drainer.result. */
export interface Result {
    status: Status;
    /**
     * The provider's answer once the call succeeded: its JSON body, or
     * `{"body": "<text>"}` for a body that is not JSON. Null before success
     * and for pruned rows.
     */
    response: unknown;
    /** Why the last attempt failed, when one did. */
    lastError: string | null;
}
/** Options of every call. */
export interface SchemaOptions {
    /** The schema holding drainer's tables and functions (default "drainer"); always quoted. */
    schema?: string;
}
/** Options of enqueue. */
export interface EnqueueOptions extends SchemaOptions {
    /**
     * Refuse payloads larger than this many bytes of compact JSON before
     * touching the database (default 1 MiB, the default of the database
     * setting drainer.max_payload_bytes). Raise it together with that setting.
     */
    maxPayloadBytes?: number;
    /** A W3C traceparent that drainer continues at dispatch. */
    traceparent?: string;
}
/** Answer of enqueue. */
export interface EnqueueResult {
    /** The intent's idempotency key (equal to idempotencyKey(tuple)). */
    key: string;
    /** False when the same tuple with the same payload was enqueued before. */
    created: boolean;
}
/** Options of waitFor. */
export interface WaitOptions extends SchemaOptions {
    /** Give up (WaitTimeoutError) after this many milliseconds; default 30000. */
    timeoutMs?: number;
    /** First delay between two reads of the outcome, in ms; default 50. */
    minPollMs?: number;
    /** Largest delay between two reads, in ms; default 1000. The delay doubles from minPollMs up to this. */
    maxPollMs?: number;
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
export declare function enqueue(client: Queryable, tuple: Tuple, payload: unknown, options?: EnqueueOptions): Promise<EnqueueResult>;
/**
 * Reads the outcome of an intent through drainer.result: its status, the
 * provider's response and the last error, or null when no row with this key
 * is visible (not committed yet, or unknown). Pruned rows answer their final
 * status with a null response.
 */
export declare function result(client: Queryable, key: string, options?: SchemaOptions): Promise<Result | null>;
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
export declare function waitFor(client: Queryable, key: string, options?: WaitOptions): Promise<Result>;
/**
 * Quotes a schema name as an SQL identifier ("..." with inner quotes
 * doubled), after checking it is a possible Postgres name: a non-empty
 * string without NUL, at most 63 bytes. Quoted names are case-sensitive:
 * `drainer migrate` creates lower-case ones.
 */
export declare function quoteSchema(schema: string | undefined): string;
/** The client's transaction status ('I', 'T', 'E'), or undefined when it cannot tell (a Pool). */
export declare function transactionStatus(client: Queryable): string | undefined;
