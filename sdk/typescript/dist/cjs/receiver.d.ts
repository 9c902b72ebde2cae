import { Buffer } from 'node:buffer';
import { IncomingMessage, type ServerResponse } from 'node:http';
/** A node-postgres PoolClient, as far as the receiver uses it. */
export interface ReceiverClient {
    query(text: string, values?: unknown[]): Promise<{
        rows: any[];
        rowCount: number | null;
    }>;
    release(err?: Error | boolean): void;
}
/** A node-postgres Pool, as far as the receiver uses it. */
export interface ReceiverPool {
    connect(): Promise<ReceiverClient>;
    query(text: string, values?: unknown[]): Promise<{
        rows: any[];
        rowCount: number | null;
    }>;
    /**
     * node-postgres's counts of the pool's clients and its options: with
     * inTransaction, a connect() that gave up waiting (connectionTimeoutMillis)
     * while all `max` clients were checked out is answered 503 pool-exhausted.
     */
    readonly totalCount?: number;
    readonly idleCount?: number;
    readonly options?: {
        max?: number;
        connectionTimeoutMillis?: number;
    };
}
export type Mode = 'seed' | 'ietf';
export interface ReceiverOptions {
    /** Schema of the records table (default drainer_receiver); migrate() creates it. */
    schema?: string;
    /** Request header carrying the key (default Idempotency-Key). */
    keyHeader?: string;
    /** How long a key is honoured from its first request, in ms (default 24h). */
    ttlMs?: number;
    /**
     * How long a record stays in flight before a retry may take it over, in ms
     * (default 60s). Also how long a keyed request whose client hung up before
     * the handler answered waits for the handler's end() (see middleware()).
     */
    recoveryTimeoutMs?: number;
    /**
     * With inTransaction: the request's transaction sets Postgres's
     * idle_in_transaction_session_timeout to this many ms (SET LOCAL), so when
     * the service freezes, is cut off or vanishes mid-handler, the server ends
     * its session after this long without a statement, rolling back the record
     * and the effect, and the key is free again for a retry (without it
     * Postgres holds them until it notices the dead connection, by default
     * about two hours). A handler that stays this long without a statement in
     * its transaction (waiting on another service, say) loses its session too:
     * nothing of it commits and the client gets an error (the handler's own,
     * or 503). Default 60000 (1 minute); raise it for such a handler.
     * Negative: not set (the server's setting applies).
     */
    idleInTransactionTimeoutMs?: number;
    /** The key space of a request (account, user, tenant); default one global scope. */
    scope?: (req: IncomingMessage) => string;
    /** 'seed' (default): a replayed 201 answers 200, a mismatch 409; 'ietf': stored status, mismatch 422. */
    mode?: Mode;
    /** Which requests need a key; default POST, PUT, PATCH and DELETE. Others pass through. */
    requireKey?: (req: IncomingMessage) => boolean;
    /** Largest request body accepted, in bytes (default 1 MiB); larger: 413 before anything is stored. */
    maxBody?: number;
    /** Store 5xx answers too (default false: the record is released and a retry runs the handler again). */
    storeServerErrors?: boolean;
    /** Response headers stored and replayed besides Content-Type and Location. */
    storeHeaders?: string[];
    /**
     * Run each keyed request's handler inside the transaction that writes its
     * record and stores its answer; the handler reaches it with
     * currentClient(req) and must not commit or roll back itself. Effect,
     * record and answer commit together or not at all, so a process that dies
     * mid-request leaves nothing behind and a retry runs the handler again.
     * The recommended setting for a handler whose effect is in the same
     * database.
     */
    inTransaction?: boolean;
    /**
     * Let a retry run the handler again when the request holding the key
     * stopped mid-run outside inTransaction (its process died and the
     * recovery timeout passed), although its effect may exist. Set it only for
     * a handler that is safe to run twice. Without it such a retry is answered
     * 409 Idempotency-Conflict: outcome-unknown, the handler does not run, and
     * the record is reported (logger.error, drainer_receiver_abandoned_total)
     * and kept for a person to resolve.
     */
    rerunAbandoned?: boolean;
    /** Receives the reports of abandoned records, naming scope and key (default console). */
    logger?: ReceiverLogger;
    /**
     * Receives the error of a request that wrap()'s function could not serve:
     * a handler that threw (its record was released first, so a retry runs
     * it again) or a failure of the receiver itself. The request was
     * answered 500 `handler-error` if nothing had been sent yet. Default:
     * console.error. wrap()'s function never rejects, so a plain
     * `http.createServer(receiver.wrap(handler))` has no unhandled rejection.
     */
    onError?: (err: unknown, req: IncomingMessage) => void;
}
/** Where the receiver reports abandoned records; console fits. */
export interface ReceiverLogger {
    error(message: string, fields: Record<string, string>): void;
    warn(message: string, fields: Record<string, string>): void;
}
/** A Node `(req, res)` handler; it may return a promise. */
export type Handler = (req: IncomingMessage, res: ServerResponse) => unknown;
/** An Express-style middleware. */
export type Middleware = (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void;
export interface Receiver {
    /**
     * Creates the schema, table and index if missing (safe from many processes at once). On an
     * up-to-date store it runs no DDL and takes no lock on the records table.
     */
    migrate(): Promise<void>;
    /**
     * Returns handler behind the receiver, a Node `(req, res)` listener. Its
     * promise never rejects: when the handler throws, its record is released
     * (a retry runs it again), the request is answered 500 `handler-error`
     * (application/problem+json) unless something was sent already, and the
     * error goes to the onError option (default console.error).
     */
    wrap(handler: Handler): (req: IncomingMessage, res: ServerResponse) => Promise<void>;
    /**
     * Express-style middleware. It reads the whole body before deciding, so it
     * hands it on as req.rawBody (a Buffer) and req.body (the parsed JSON for
     * a JSON content type, else the Buffer) with req._body set, as
     * express.json() does.
     */
    middleware(): Middleware;
    /** Deletes expired records in batches of 1000; resolves to how many. */
    prune(): Promise<number>;
    /**
     * drainer_receiver_abandoned_total by outcome: outcome_unknown (answered
     * 409, left for a person) and rerun (rerunAbandoned).
     */
    readonly abandonedTotal: Readonly<Record<AbandonedOutcome, number>>;
    /** The receiver's counter in the Prometheus text format, to serve (or append to what is served) at /metrics. */
    metrics(): string;
}
/** The outcome label values of drainer_receiver_abandoned_total. */
export type AbandonedOutcome = 'outcome_unknown' | 'rerun';
export declare const DEFAULT_SCHEMA = "drainer_receiver";
export declare const DEFAULT_KEY_HEADER = "Idempotency-Key";
export declare const MAX_KEY_BYTES = 255;
/** The client whose open transaction a keyed request's handler runs in (inTransaction), else undefined. */
export declare function currentClient(req: IncomingMessage): ReceiverClient | undefined;
/** The body as the fingerprint sees it: JCS canonical JSON for a JSON body that parses strictly, else the bytes. */
export declare function canonicalBody(contentType: string, body: Uint8Array): Buffer;
/** SHA-256 over METHOD "\n" PATH "\n" BODY: the same bytes as Go's receiver.Fingerprint. */
export declare function fingerprint(method: string, path: string, contentType: string, body: Uint8Array): Buffer;
/** Why a key is not acceptable (1 to 255 bytes of UTF-8, no control characters), or undefined. */
export declare function checkKey(key: string): string | undefined;
/**
 * Creates a receiver storing its records through a node-postgres Pool.
 * Call migrate() once at startup, then serve wrap(handler) or use
 * middleware().
 */
export declare function createReceiver(pool: ReceiverPool, options?: ReceiverOptions): Receiver;
