// @drainer/client/receiver: the idempotency receiver for Node services
// (docs/receiver.md, docs/reference.md §11). The provider's half of
// drainer's contract: it makes a handler answer the retries of one
// idempotency key with one effect and a byte-identical stored answer. Same
// table layout, fingerprint and request flow as the Go package receiver and
// Python's drainer_client.receiver, so services in all three share one store.

import { Buffer } from 'node:buffer';
import { createHash } from 'node:crypto';
import { IncomingMessage, type ServerResponse } from 'node:http';

import { canonicalJSON } from './jcs.js';
import { idempotencyKey, KEY_PREFIX } from './key.js';

/** A node-postgres PoolClient, as far as the receiver uses it. */
export interface ReceiverClient {
  query(text: string, values?: unknown[]): Promise<{ rows: any[]; rowCount: number | null }>;
  release(err?: Error | boolean): void;
}

/** A node-postgres Pool, as far as the receiver uses it. */
export interface ReceiverPool {
  connect(): Promise<ReceiverClient>;
  query(text: string, values?: unknown[]): Promise<{ rows: any[]; rowCount: number | null }>;
  /**
   * node-postgres's counts of the pool's clients and its options: with
   * inTransaction, a connect() that gave up waiting (connectionTimeoutMillis)
   * while all `max` clients were checked out is answered 503 pool-exhausted.
   */
  readonly totalCount?: number;
  readonly idleCount?: number;
  readonly options?: { max?: number; connectionTimeoutMillis?: number };
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

export const DEFAULT_SCHEMA = 'drainer_receiver';
export const DEFAULT_KEY_HEADER = 'Idempotency-Key';
export const MAX_KEY_BYTES = 255;
const DEFAULT_TTL_MS = 24 * 3600 * 1000;
const DEFAULT_RECOVERY_MS = 60 * 1000;
const DEFAULT_IDLE_IN_TRANSACTION_MS = 60 * 1000;
const MAX_INT32 = 2 ** 31 - 1;
const DEFAULT_MAX_BODY = 1 << 20;
const MIGRATE_LOCK = 'drainer_receiver.migrate';
const PRUNE_BATCH = 1000;
const PROBLEM_BASE = 'https://drainer.dev/problems/';
const KEYED = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);
const LOCK_NOT_AVAILABLE = '55P03';
// SQLSTATEs of a transaction the database aborted to keep concurrent
// transactions apart (under REPEATABLE READ or SERIALIZABLE, or a
// deadlock): nothing of it committed, and running it again is safe.
const SERIALIZATION_FAILURE = '40001';
const DEADLOCK_DETECTED = '40P01';
// What node-postgres's Pool.connect() rejects with when a caller queued for
// a client (every one checked out) waited connectionTimeoutMillis in vain.
const POOL_WAIT_TIMEOUT = 'timeout exceeded when trying to connect';
const CLAIM_ROUNDS = 3;

const clients = new WeakMap<IncomingMessage, ReceiverClient>();

/** The client whose open transaction a keyed request's handler runs in (inTransaction), else undefined. */
export function currentClient(req: IncomingMessage): ReceiverClient | undefined {
  return clients.get(req);
}

function isJSON(contentType: string): boolean {
  const mt = (contentType.split(';', 1)[0] ?? '').trim().toLowerCase();
  return mt === 'application/json' || (mt.startsWith('application/') && mt.endsWith('+json'));
}

/** The body as the fingerprint sees it: JCS canonical JSON for a JSON body that parses strictly, else the bytes. */
export function canonicalBody(contentType: string, body: Uint8Array): Buffer {
  if (isJSON(contentType)) {
    const c = canonicalJSON(body);
    if (c) return c;
  }
  return Buffer.from(body);
}

/** SHA-256 over METHOD "\n" PATH "\n" BODY: the same bytes as Go's receiver.Fingerprint. */
export function fingerprint(method: string, path: string, contentType: string, body: Uint8Array): Buffer {
  return createHash('sha256')
    .update(method.toUpperCase(), 'utf8')
    .update('\n')
    .update(path, 'utf8')
    .update('\n')
    .update(canonicalBody(contentType, body))
    .digest();
}

/** Why a key is not acceptable (1 to 255 bytes of UTF-8, no control characters), or undefined. */
export function checkKey(key: string): string | undefined {
  if (key === '') return 'the key is empty';
  const n = Buffer.byteLength(key, 'utf8');
  if (n > MAX_KEY_BYTES) return `the key is ${n} bytes, more than the limit of ${MAX_KEY_BYTES}`;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c < 0x20 || c === 0x7f) return `the key contains a control character at index ${i}`;
  }
  return undefined;
}

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** Node decodes header values as latin1: recover the bytes, then read them as UTF-8. */
function headerUTF8(v: string): string | undefined {
  try {
    return utf8.decode(Buffer.from(v, 'latin1'));
  } catch {
    return undefined;
  }
}

const TUPLE_FIELDS = ['agent_run_id', 'step_id', 'tool_name', 'business_scope'] as const;

function checkTuple(values: string[], key: string): string | undefined {
  if (values.length > 1) return `the header appears ${values.length} times`;
  const raw = values[0] ?? '';
  if (!/^[A-Za-z0-9_-]*$/.test(raw) || raw.length % 4 === 1) return 'not unpadded base64url';
  const notTuple = 'not the JSON object of the four tuple fields';
  let obj: unknown;
  try {
    obj = JSON.parse(utf8.decode(Buffer.from(raw, 'base64url')));
  } catch {
    return notTuple;
  }
  if (typeof obj !== 'object' || obj === null || Array.isArray(obj)) return notTuple;
  const o = obj as Record<string, unknown>;
  for (const [k, v] of Object.entries(o)) {
    if (!(TUPLE_FIELDS as readonly string[]).includes(k) || typeof v !== 'string') return notTuple;
  }
  const f = (k: string) => (o[k] as string | undefined) ?? '';
  let recomputed: string;
  try {
    recomputed = idempotencyKey({
      agentRunId: f('agent_run_id'),
      stepId: f('step_id'),
      toolName: f('tool_name'),
      businessScope: f('business_scope'),
    });
  } catch {
    return notTuple;
  }
  return recomputed === key ? undefined : "the key recomputed from the tuple differs from the request's key";
}

class Problem {
  constructor(
    readonly status: number,
    readonly slug: string,
    readonly title: string,
    readonly detail: string,
    readonly headers: Record<string, string> = {},
    /** The idempotency key, where a person needs it (outcome-unknown). */
    readonly key?: string,
  ) {}

  send(res: ServerResponse, write = res.writeHead.bind(res), end = res.end.bind(res)): void {
    const doc: Record<string, unknown> = { type: PROBLEM_BASE + this.slug, title: this.title, status: this.status, detail: this.detail };
    if (this.key !== undefined) doc['idempotency_key'] = this.key;
    const body = Buffer.from(JSON.stringify(doc));
    write(this.status, {
      ...this.headers,
      'Content-Type': 'application/problem+json',
      'Content-Length': String(body.length),
    });
    end(body);
  }
}

function unavailable(detail: string): Problem {
  return new Problem(503, 'unavailable', 'Idempotency store unavailable', detail, { 'Retry-After': '1' });
}

/** 503 serialization-failure when err is a serialization failure (40001) or a deadlock (40P01), else undefined. */
function serializationFailure(err: unknown): Problem | undefined {
  const code = (err as { code?: unknown } | null | undefined)?.code;
  if (code !== SERIALIZATION_FAILURE && code !== DEADLOCK_DETECTED) return undefined;
  const what = code === DEADLOCK_DETECTED ? 'a deadlock' : 'a serialization failure';
  return new Problem(
    503,
    'serialization-failure',
    'Transaction conflict',
    `the database aborted the request's transaction with ${what} (SQLSTATE ${code}): it conflicted with a ` +
      'concurrent transaction; nothing was committed, and it is safe to retry with the same key',
    { 'Retry-After': '1' },
  );
}

/** The version of a key of drainer's scheme ("idem_v<digits>_…", docs/reference.md §1), e.g. "v1", or undefined. */
function keyVersion(key: string): string | undefined {
  return /^idem_(v[0-9]+)_/.exec(key)?.[1];
}

/** Header names stored as Go's http.CanonicalHeaderKey writes them. */
function canonicalHeader(name: string): string {
  return name
    .split('-')
    .map((p) => p.slice(0, 1).toUpperCase() + p.slice(1).toLowerCase())
    .join('-');
}

function quoteIdent(s: string): string {
  return '"' + s.replaceAll('"', '""') + '"';
}

interface Stored {
  status: number;
  headers: Record<string, string[]>;
  body: Buffer;
}

/**
 * The claim step's decision. abandoned: this claim found the record of a
 * request that stopped mid-run and marked it outcome_unknown or (claimed)
 * took it over with rerunAbandoned; the caller reports it once committed.
 */
type Claim =
  | { outcome: 'claimed'; token: string; abandoned?: boolean }
  | { outcome: 'replay'; answer: Stored }
  | { outcome: 'mismatch' }
  | { outcome: 'in_flight' }
  | { outcome: 'outcome_unknown'; abandoned?: boolean };

/**
 * Buffers a handler's answer so it can be stored before it is sent.
 *
 * A client that hangs up before the handler ended its answer cancels
 * nothing: finished() still waits for the handler's end(), so its effect and
 * answer are committed once and a retry gets the replay; only a handler
 * that has not ended graceMs after the close (it stopped when its client
 * left, say) is given up then, and its record released or its transaction
 * rolled back as for a handler that sent no answer.
 */
class Capture {
  readonly chunks: Buffer[] = [];
  ended = false;
  /** The answer went back to the response (restore): nothing is captured or waited for any more. */
  private released = false;
  private readonly done: Promise<void>;
  private resolveDone!: () => void;
  private grace: ReturnType<typeof setTimeout> | undefined;
  private readonly orig: { writeHead: any; write: any; end: any; flushHeaders: any };

  constructor(
    private readonly res: ServerResponse,
    graceMs: number,
  ) {
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
    const r = res as any;
    this.orig = { writeHead: r.writeHead, write: r.write, end: r.end, flushHeaders: r.flushHeaders };
    const toBuf = (chunk: unknown, enc?: unknown): Buffer | undefined => {
      if (chunk === undefined || chunk === null || typeof chunk === 'function') return undefined;
      if (typeof chunk === 'string') return Buffer.from(chunk, typeof enc === 'string' ? (enc as BufferEncoding) : 'utf8');
      return Buffer.from(chunk as Uint8Array);
    };
    r.writeHead = (status: number, reason?: unknown, headers?: unknown) => {
      res.statusCode = status;
      const h = typeof reason === 'string' ? headers : reason;
      if (Array.isArray(h)) {
        for (let i = 0; i + 1 < h.length; i += 2) res.setHeader(String(h[i]), h[i + 1]);
      } else if (h && typeof h === 'object') {
        for (const [k, v] of Object.entries(h as Record<string, unknown>)) {
          if (v !== undefined) res.setHeader(k, v as string | string[]);
        }
      }
      return res;
    };
    r.flushHeaders = () => {};
    r.write = (chunk: unknown, enc?: unknown, cb?: unknown) => {
      const b = toBuf(chunk, enc);
      if (b) this.chunks.push(b);
      const callback = typeof enc === 'function' ? enc : cb;
      if (typeof callback === 'function') queueMicrotask(() => (callback as () => void)());
      return true;
    };
    r.end = (chunk?: unknown, enc?: unknown, cb?: unknown) => {
      if (this.ended) return res;
      const b = toBuf(chunk, enc);
      if (b) this.chunks.push(b);
      this.ended = true;
      const callback = typeof chunk === 'function' ? chunk : typeof enc === 'function' ? enc : cb;
      if (typeof callback === 'function') res.once('finish', callback as () => void);
      this.settle();
      return res;
    };
    res.once('close', () => {
      // The client left before the handler answered: the handler goes on.
      // (Not after restore: the receiver answers itself then, and a timer
      // left armed would hold the process for graceMs.)
      if (this.ended || this.released || this.grace !== undefined) return;
      this.grace = setTimeout(() => this.settle(), graceMs);
    });
  }

  private settle(): void {
    if (this.grace !== undefined) clearTimeout(this.grace);
    this.resolveDone();
  }

  /**
   * Resolves once the handler ended the answer, or graceMs after the
   * connection closed without it.
   */
  finished(): Promise<void> {
    return this.done;
  }

  body(): Buffer {
    return Buffer.concat(this.chunks);
  }

  stored(keep: Set<string>): Stored {
    const headers: Record<string, string[]> = {};
    for (const [name, v] of Object.entries(this.res.getHeaders())) {
      if (!keep.has(name.toLowerCase()) || v === undefined) continue;
      headers[canonicalHeader(name)] = Array.isArray(v) ? v.map(String) : [String(v)];
    }
    return { status: this.res.statusCode, headers, body: this.body() };
  }

  restore(): void {
    Object.assign(this.res as any, this.orig);
    this.released = true;
    this.settle();
  }

  /** Sends the buffered answer, marked as no replay; a no-op once the client is gone (the answer is stored). */
  flush(): void {
    this.restore();
    const body = this.body();
    const res = this.res;
    if (res.headersSent || res.writableEnded || res.destroyed) return;
    try {
      res.setHeader('Idempotency-Replay', 'false');
      res.setHeader('Content-Length', String(body.length));
      res.end(body);
    } catch {
      // The connection went away meanwhile: nothing to send to.
    }
  }
}

class ReceiverImpl implements Receiver {
  private readonly schema: string;
  private readonly table: string;
  private readonly keyHeader: string;
  private readonly keyHeaderName: string;
  private readonly ttlUs: number;
  private readonly recoveryUs: number;
  private readonly recoveryMs: number;
  private readonly beginSQL: string;
  private readonly scopeOf: (req: IncomingMessage) => string;
  private readonly mode: Mode;
  private readonly requireKey: (req: IncomingMessage) => boolean;
  private readonly maxBody: number;
  private readonly storeServerErrors: boolean;
  private readonly keep: Set<string>;
  private readonly inTransaction: boolean;
  private readonly rerunAbandoned: boolean;
  private readonly logger: ReceiverLogger;
  private readonly onError: (err: unknown, req: IncomingMessage) => void;
  readonly abandonedTotal: Record<AbandonedOutcome, number> = { outcome_unknown: 0, rerun: 0 };

  constructor(
    private readonly pool: ReceiverPool,
    o: ReceiverOptions,
  ) {
    const problems: string[] = [];
    this.schema = o.schema ?? DEFAULT_SCHEMA;
    if (this.schema === '' || this.schema.includes('\0') || Buffer.byteLength(this.schema) > 63) {
      problems.push(`schema ${JSON.stringify(this.schema)} must be 1 to 63 bytes without NUL`);
    }
    this.keyHeaderName = o.keyHeader ?? DEFAULT_KEY_HEADER;
    this.keyHeader = this.keyHeaderName.toLowerCase();
    const ttl = o.ttlMs ?? DEFAULT_TTL_MS;
    const rec = o.recoveryTimeoutMs ?? DEFAULT_RECOVERY_MS;
    if (!(ttl >= 1)) problems.push(`ttlMs is ${ttl}, must be at least 1`);
    if (!(rec >= 1)) problems.push(`recoveryTimeoutMs is ${rec}, must be at least 1`);
    const idle = o.idleInTransactionTimeoutMs ?? DEFAULT_IDLE_IN_TRANSACTION_MS;
    if (!(idle < 0) && !(idle >= 1 && idle <= MAX_INT32)) {
      problems.push(`idleInTransactionTimeoutMs is ${idle}, must be from 1 to ${MAX_INT32} (or negative: not set)`);
    }
    this.ttlUs = Math.round(ttl * 1000);
    this.recoveryUs = Math.round(rec * 1000);
    this.recoveryMs = rec;
    // The transaction of an inTransaction request: the server ends the
    // session of a service that stopped mid-handler after idle ms without a
    // statement, which rolls the record back and frees the key.
    this.beginSQL = idle < 0 ? 'BEGIN' : `BEGIN; SET LOCAL idle_in_transaction_session_timeout = ${Math.round(idle)}`;
    this.mode = o.mode ?? 'seed';
    if (this.mode !== 'seed' && this.mode !== 'ietf') problems.push(`mode is ${JSON.stringify(this.mode)}, must be "seed" or "ietf"`);
    this.maxBody = o.maxBody ?? DEFAULT_MAX_BODY;
    if (!(this.maxBody >= 0)) problems.push(`maxBody is ${this.maxBody}, must not be negative`);
    if (problems.length) throw new TypeError('@drainer/client/receiver: ' + problems.join('; '));
    this.table = quoteIdent(this.schema) + '.records';
    this.scopeOf = o.scope ?? (() => '');
    this.requireKey = o.requireKey ?? ((req) => KEYED.has((req.method ?? '').toUpperCase()));
    this.storeServerErrors = o.storeServerErrors ?? false;
    this.keep = new Set(['content-type', 'location', ...(o.storeHeaders ?? []).map((h) => h.toLowerCase())]);
    this.inTransaction = o.inTransaction ?? false;
    this.rerunAbandoned = o.rerunAbandoned ?? false;
    this.logger = o.logger ?? console;
    this.onError = o.onError ?? ((err, req) => console.error(`@drainer/client/receiver: ${req.method} ${req.url}: the handler failed:`, err));
  }

  metrics(): string {
    return (
      '# HELP drainer_receiver_abandoned_total Keyed requests whose process stopped mid-request outside ' +
      'inTransaction, found by a retry after the recovery timeout: outcome_unknown (answered 409, left for a ' +
      'person) or rerun (rerunAbandoned).\n' +
      '# TYPE drainer_receiver_abandoned_total counter\n' +
      `drainer_receiver_abandoned_total{outcome="outcome_unknown"} ${this.abandonedTotal.outcome_unknown}\n` +
      `drainer_receiver_abandoned_total{outcome="rerun"} ${this.abandonedTotal.rerun}\n`
    );
  }

  /** Counts and logs a record whose request stopped mid-run, with its scope and key (a person resolves it by the key). */
  private reportAbandoned(scope: string, key: string, rerun: boolean): void {
    const fields = { schema: this.schema, scope, key };
    if (rerun) {
      this.abandonedTotal.rerun++;
      this.logger.warn('receiver: a request stopped mid-run; its handler runs again (rerunAbandoned)', fields);
      return;
    }
    this.abandonedTotal.outcome_unknown++;
    this.logger.error(
      'receiver: a request stopped mid-run and its effect may exist; retries are answered 409 outcome-unknown until a person resolves the record',
      fields,
    );
  }

  async migrate(): Promise<void> {
    const s = quoteIdent(this.schema);
    const c = await this.pool.connect();
    try {
      await c.query('BEGIN');
      try {
        await c.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [MIGRATE_LOCK]);
        // An up-to-date store gets no DDL, so no lock on the records table:
        // CREATE INDEX IF NOT EXISTS, for one, locks the table before it
        // finds the index, and would queue behind (and hold up) every
        // request the running replicas are serving.
        const current = await c.query(
          `SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL
             AND EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass($1) AND conname = 'records_state') AS current`,
          [this.table, `${s}.records_expires_idx`],
        );
        if (current.rows[0].current) {
          await c.query('COMMIT');
          return;
        }
        await c.query(`CREATE SCHEMA IF NOT EXISTS ${s}`);
        await c.query(`CREATE TABLE IF NOT EXISTS ${s}.records (
    scope         text        NOT NULL,
    key           text        NOT NULL,
    fingerprint   bytea       NOT NULL,
    state         text        NOT NULL,
    locked_until  timestamptz,
    status        integer,
    headers       jsonb,
    body          bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    completed_at  timestamptz,
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (scope, key),
    CONSTRAINT records_state CHECK (state IN ('in_flight', 'completed', 'outcome_unknown'))
)`);
        await c.query(`CREATE INDEX IF NOT EXISTS records_expires_idx ON ${s}.records (expires_at)`);
        // A store created before the outcome_unknown state had the unnamed
        // check records_state_check; every row passes the wider one.
        const has = await c.query(
          `SELECT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = $1::regclass AND conname = 'records_state') AS has`,
          [this.table],
        );
        if (!has.rows[0].has) {
          await c.query(`ALTER TABLE ${s}.records DROP CONSTRAINT IF EXISTS records_state_check,
    ADD CONSTRAINT records_state CHECK (state IN ('in_flight', 'completed', 'outcome_unknown'))`);
        }
        await c.query('COMMIT');
      } catch (err) {
        await c.query('ROLLBACK').catch(() => {});
        throw err;
      }
    } finally {
      c.release();
    }
  }

  async prune(): Promise<number> {
    const q = `DELETE FROM ${this.table} WHERE (scope, key) IN (SELECT scope, key FROM ${this.table}
      WHERE expires_at <= now() LIMIT ${PRUNE_BATCH} FOR UPDATE SKIP LOCKED)`;
    let total = 0;
    for (;;) {
      const r = await this.pool.query(q);
      const n = r.rowCount ?? 0;
      total += n;
      if (n < PRUNE_BATCH) return total;
    }
  }

  wrap(handler: Handler): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
    return async (req, res) => {
      try {
        if (!this.requireKey(req)) {
          await handler(req, res);
          return;
        }
        const body = await this.readBody(req, res);
        if (body === undefined) return;
        await this.serve(req, res, body, handler, replayRequest(req, body));
      } catch (err) {
        // A plain node http server does nothing with a rejection but crash
        // the process (every other request in flight with it): answer and
        // report here. A keyed request's record was released already.
        this.failed(err, req, res);
      }
    };
  }

  /**
   * Answers 500 handler-error if nothing was sent yet (an answer cut off
   * midway ends the connection instead), and reports err to onError.
   */
  private failed(err: unknown, req: IncomingMessage, res: ServerResponse): void {
    if (!res.headersSent && !res.writableEnded && !res.destroyed) {
      try {
        new Problem(
          500,
          'handler-error',
          'Handler failed',
          "the request's handler failed before it answered; no answer was stored for its idempotency key",
        ).send(res);
      } catch {
        // The connection went away meanwhile: nothing to send to.
      }
    } else if (!res.writableEnded && !res.destroyed) {
      res.destroy();
    }
    try {
      this.onError(err, req);
    } catch (e) {
      console.error('@drainer/client/receiver: onError threw:', e, 'reporting:', err);
    }
  }

  middleware(): Middleware {
    return (req, res, next) => {
      if (!this.requireKey(req)) {
        next();
        return;
      }
      void (async () => {
        const body = await this.readBody(req, res);
        if (body === undefined) return;
        const r = req as IncomingMessage & { rawBody?: Buffer; body?: unknown; _body?: boolean };
        r.rawBody = body;
        r.body = body;
        if (isJSON(String(req.headers['content-type'] ?? ''))) {
          try {
            r.body = body.length ? JSON.parse(body.toString('utf8')) : {};
          } catch {
            r.body = body;
          }
        }
        r._body = true;
        // The rest of the chain answers (or fails into Express's error handler, which answers).
        await this.serve(req, res, body, () => next(), req);
      })().catch((err) => next(err));
    };
  }

  /** The whole body, or undefined when an answer (413) was sent already. */
  private readBody(req: IncomingMessage, res: ServerResponse): Promise<Buffer | undefined> {
    const tooLarge = () =>
      new Problem(413, 'too-large', 'Request body too large', `the request body is larger than the limit of ${this.maxBody} bytes`, {
        Connection: 'close',
      }).send(res);
    const declared = Number(req.headers['content-length'] ?? NaN);
    if (declared > this.maxBody) {
      tooLarge();
      req.resume();
      return Promise.resolve(undefined);
    }
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      let over = false;
      req.on('data', (c: Buffer) => {
        if (over) return;
        size += c.length;
        if (size > this.maxBody) {
          over = true;
          tooLarge();
          resolve(undefined);
          return;
        }
        chunks.push(c);
      });
      req.on('end', () => {
        if (!over) resolve(Buffer.concat(chunks));
      });
      req.on('error', (err) => (over ? undefined : reject(err)));
    });
  }

  private requestKey(req: IncomingMessage): string {
    const name = this.keyHeaderName;
    const vals = headerValues(req, this.keyHeader);
    if (vals.length === 0 || (vals.length === 1 && vals[0] === '')) {
      throw new Problem(400, 'missing-key', 'Idempotency key missing', `this request needs an idempotency key in header ${name}`);
    }
    if (vals.length > 1) {
      throw new Problem(400, 'invalid-key', 'Invalid idempotency key', `header ${name} appears ${vals.length} times; send it once`);
    }
    const key = headerUTF8(vals[0] ?? '');
    if (key === undefined) {
      throw new Problem(400, 'invalid-key', 'Invalid idempotency key', `header ${name}: the key is not valid UTF-8`);
    }
    const why = checkKey(key);
    if (why) throw new Problem(400, 'invalid-key', 'Invalid idempotency key', `header ${name}: ${why}`);
    const tuple = headerValues(req, 'x-agent-idempotency-tuple');
    if (tuple.length) {
      const v = keyVersion(key);
      if (v !== undefined && !key.startsWith(KEY_PREFIX)) {
        const known = KEY_PREFIX.slice('idem_'.length, -1);
        throw new Problem(
          400,
          'unsupported-key-version',
          'Unsupported idempotency key version',
          `header ${name}: the key is of version ${v} (idem_${v}_), which this receiver does not know: it checks ` +
            `X-Agent-Idempotency-Tuple against keys of version ${known} (${KEY_PREFIX}) only`,
        );
      }
      const w = checkTuple(tuple, key);
      if (w) {
        throw new Problem(400, 'tuple-mismatch', 'Idempotency tuple does not match the key', `header X-Agent-Idempotency-Tuple: ${w}`);
      }
    }
    return key;
  }

  private async serve(
    req: IncomingMessage,
    res: ServerResponse,
    body: Buffer,
    run: (req: IncomingMessage, res: ServerResponse) => unknown,
    handlerReq: IncomingMessage,
  ): Promise<void> {
    let key: string;
    let scope: string;
    let fp: Buffer;
    let token = '';
    try {
      key = this.requestKey(req);
      scope = this.scopeOf(req);
      if (typeof scope !== 'string' || scope.includes('\0')) {
        throw new Problem(400, 'invalid-scope', 'Invalid scope', "the request's scope is not a string without NUL");
      }
      const path = (req.url ?? '/').split('?', 1)[0] ?? '/';
      fp = fingerprint(req.method ?? '', path, String(req.headers['content-type'] ?? ''), body);
      if (!this.inTransaction) {
        let claim: Claim;
        try {
          claim = await this.claim(scope, key, fp);
        } catch (err) {
          throw this.storeFailure(
            err,
            false,
            'the idempotency store could not be reached; the request was not processed, retry it with the same key',
          );
        }
        if ('abandoned' in claim && claim.abandoned) this.reportAbandoned(scope, key, claim.outcome === 'claimed');
        if (claim.outcome !== 'claimed') {
          this.refuse(res, key, claim);
          return;
        }
        token = claim.token;
      }
    } catch (err) {
      if (err instanceof Problem) {
        err.send(res);
        return;
      }
      throw err;
    }
    if (this.inTransaction) await this.serveInTransaction(handlerReq, res, run, scope, key, fp);
    else await this.run(handlerReq, res, run, scope, key, token);
  }

  /** Answers a request whose claim did not give it the record. */
  private refuse(res: ServerResponse, key: string, claim: Exclude<Claim, { outcome: 'claimed' }>): void {
    switch (claim.outcome) {
      case 'replay':
        this.replay(res, claim.answer);
        return;
      case 'mismatch':
        new Problem(
          this.mode === 'ietf' ? 422 : 409,
          'payload-mismatch',
          'Idempotency key reused with a different request',
          'this key was first used with another method, path or body; use a new key for a new request',
          { 'Idempotency-Conflict': 'payload-mismatch' },
        ).send(res);
        return;
      case 'outcome_unknown':
        new Problem(
          409,
          'outcome-unknown',
          'Outcome of the request with this key unknown',
          `the first request with idempotency key ${key} stopped before its answer was stored, and its effect may ` +
            'exist; it is not run again: the key is held until the provider resolves it',
          { 'Idempotency-Conflict': 'outcome-unknown' },
          key,
        ).send(res);
        return;
      default:
        new Problem(
          409,
          'in-flight',
          'Request with this key in flight',
          'a request with this key is still being processed; retry later with the same key',
          { 'Idempotency-Conflict': 'in-flight', 'Retry-After': '1' },
        ).send(res);
    }
  }

  private async run(
    req: IncomingMessage,
    res: ServerResponse,
    run: (req: IncomingMessage, res: ServerResponse) => unknown,
    scope: string,
    key: string,
    token: string,
  ): Promise<void> {
    const cap = new Capture(res, this.recoveryMs);
    const alive = this.keepAlive(scope, key, token);
    try {
      await run(req, res);
      await cap.finished();
    } catch (err) {
      cap.restore();
      await this.release(scope, key, await alive.stop());
      throw err;
    }
    token = await alive.stop();
    if (!cap.ended) {
      cap.restore();
      await this.release(scope, key, token);
      return;
    }
    const answer = cap.stored(this.keep);
    if (answer.status >= 500 && !this.storeServerErrors) {
      await this.release(scope, key, token);
    } else {
      // If this fails the answer still goes out; after the recovery timeout a retry finds the record abandoned.
      await this.complete(this.pool, scope, key, token, answer).catch(() => false);
    }
    cap.flush();
  }

  /**
   * Claims the record and runs the handler in one transaction that also
   * completes the record (inTransaction): a crash, a throw or a 5xx rolls
   * back the record with the handler's effect.
   */
  private async serveInTransaction(
    req: IncomingMessage,
    res: ServerResponse,
    run: (req: IncomingMessage, res: ServerResponse) => unknown,
    scope: string,
    key: string,
    fp: Buffer,
  ): Promise<void> {
    const fail = (err: unknown, poolWait = false) =>
      this.storeFailure(
        err,
        poolWait,
        'the idempotency store failed while processing; nothing was committed, retry with the same key',
      ).send(res);
    let c: ReceiverClient;
    try {
      c = await this.pool.connect();
    } catch (err) {
      fail(err, true);
      return;
    }
    let broken: Error | undefined;
    // A checked-out node-postgres client has no 'error' listener of the
    // pool's: the server ending the session while no query runs (the idle
    // timeout of beginSQL, a restart) would otherwise be an uncaught error.
    // The client is then released as broken.
    const onError = (err: Error) => (broken = err);
    const events = c as unknown as { on?: (e: 'error', l: (err: Error) => void) => void; off?: (e: 'error', l: (err: Error) => void) => void };
    events.on?.('error', onError);
    try {
      let claim: Claim;
      let open = true;
      try {
        await c.query(this.beginSQL);
        claim = await this.claimIn(c, scope, key, fp);
      } catch (err) {
        await c.query('ROLLBACK').catch((e: Error) => (broken = e));
        if ((err as { code?: string }).code !== LOCK_NOT_AVAILABLE) {
          broken = err as Error;
          fail(err);
          return;
        }
        claim = { outcome: 'in_flight' };
        open = false;
      }
      if (claim.outcome !== 'claimed') {
        const mark = 'abandoned' in claim && claim.abandoned === true;
        if (open) {
          try {
            await c.query(mark ? 'COMMIT' : 'ROLLBACK');
          } catch (err) {
            broken = err as Error;
            fail(err);
            return;
          }
        }
        if (mark) this.reportAbandoned(scope, key, false);
        this.refuse(res, key, claim);
        return;
      }
      if (claim.abandoned) this.reportAbandoned(scope, key, true);
      const cap = new Capture(res, this.recoveryMs);
      clients.set(req, c);
      try {
        await run(req, res);
        await cap.finished();
      } catch (err) {
        cap.restore();
        await c.query('ROLLBACK').catch((e: Error) => (broken = e));
        throw err;
      } finally {
        clients.delete(req);
      }
      const answer = cap.ended ? cap.stored(this.keep) : undefined;
      if (!answer || (answer.status >= 500 && !this.storeServerErrors)) {
        await c.query('ROLLBACK').catch((e: Error) => (broken = e));
        if (answer) cap.flush();
        else cap.restore();
        return;
      }
      try {
        if (!(await this.complete(c, scope, key, claim.token, answer))) throw new Error("the in-flight record is no longer this request's");
        await c.query('COMMIT');
      } catch (err) {
        broken = err as Error;
        await c.query('ROLLBACK').catch(() => {});
        cap.restore();
        fail(err);
        return;
      }
      cap.flush();
    } finally {
      events.off?.('error', onError);
      c.release(broken);
    }
  }

  /**
   * The 503 of a store step that failed with err, so drainer retries with
   * the same key, naming the cause where it is known: a serialization
   * failure or deadlock; or, when poolWait (the step was waiting for a
   * client of the pool) and node-postgres gave up waiting
   * (connectionTimeoutMillis) while every client of the pool was checked
   * out, an exhausted pool. Otherwise unavailable with detail.
   */
  private storeFailure(err: unknown, poolWait: boolean, detail: string): Problem {
    return serializationFailure(err) ?? (poolWait ? this.poolExhausted(err) : undefined) ?? unavailable(detail);
  }

  /** 503 pool-exhausted when err is node-postgres's timeout of a connect() queued behind a pool whose clients are all checked out. */
  private poolExhausted(err: unknown): Problem | undefined {
    if (!(err instanceof Error) || err.message !== POOL_WAIT_TIMEOUT) return undefined;
    const { totalCount: total, idleCount: idle, options } = this.pool;
    const max = options?.max;
    if (typeof total !== 'number' || typeof idle !== 'number' || typeof max !== 'number' || total - idle < max) return undefined;
    return new Problem(
      503,
      'pool-exhausted',
      'No database connection free',
      `timed out after ${options?.connectionTimeoutMillis ?? '?'} ms (connectionTimeoutMillis) waiting for a connection ` +
        `of the receiver's pool: all ${max} were in use (with inTransaction each keyed request holds one for its whole ` +
        "handler; raise the pool's max); the request was not processed, retry it with the same key",
      { 'Retry-After': '1' },
    );
  }

  /**
   * Moves a claimed record's recovery deadline forward every third of the
   * recovery timeout while the handler runs, so a slow handler is not taken
   * over by a retry (a dead process stops extending it). stop() resolves to
   * the current token once no extension is in flight.
   *
   * Each extension waits at most a third of the recovery timeout (5 s at
   * most): the server ends its statement then (statement_timeout), and one
   * on a connection that died without a word is given up, so it cannot hold
   * stop() and the answer. An extension given up may have committed a token
   * this does not hold; the answer then goes out unstored, as after a
   * takeover.
   */
  private keepAlive(scope: string, key: string, token: string): { stop(): Promise<string> } {
    let current = token;
    let stopped = false;
    let inflight: Promise<void> | undefined;
    const period = Math.max(1, Math.floor(this.recoveryUs / 3000));
    const bound = Math.min(period, 5000);
    const extend = async (from: string): Promise<{ rows: any[] }> => {
      const c = await this.pool.connect();
      let broken: Error | undefined;
      try {
        await c.query('BEGIN');
        await c.query(`SET LOCAL statement_timeout = ${bound}`);
        const r = await c.query(
          `UPDATE ${this.table} SET locked_until = now() + $4::bigint * interval '1 microsecond'
           WHERE scope = $1 AND key = $2 AND state = 'in_flight' AND locked_until = $3::timestamptz
           RETURNING locked_until::text AS token`,
          [scope, key, from, this.recoveryUs],
        );
        await c.query('COMMIT');
        return r;
      } catch (err) {
        broken = err as Error;
        throw err;
      } finally {
        c.release(broken); // a connection that failed is not reused
      }
    };
    const timer = setInterval(() => {
      if (stopped || inflight) return;
      let givenUp = false;
      let wait: ReturnType<typeof setTimeout> | undefined;
      const attempt = extend(current).then(
        (r) => {
          if (givenUp) return;
          if (r.rows.length === 1) current = r.rows[0].token;
          else clearInterval(timer); // taken over or gone
        },
        () => {}, // try again at the next beat
      );
      const late = new Promise<void>((resolve) => {
        wait = setTimeout(() => {
          givenUp = true;
          resolve();
        }, bound + 100);
        wait.unref();
      });
      inflight = Promise.race([attempt, late]).finally(() => {
        clearTimeout(wait);
        inflight = undefined;
      });
    }, period);
    timer.unref();
    return {
      stop: async () => {
        stopped = true;
        clearInterval(timer);
        await inflight;
        return current;
      },
    };
  }

  private replay(res: ServerResponse, a: Stored): void {
    let status = a.status;
    if (this.mode === 'seed' && status === 201) status = 200;
    for (const [name, values] of Object.entries(a.headers)) res.setHeader(name, values);
    res.setHeader('Idempotency-Replay', 'true');
    res.setHeader('Idempotent-Replayed', 'true');
    res.setHeader('Content-Length', String(a.body.length));
    res.statusCode = status;
    res.end(a.body);
  }

  /** Step 2 of the request flow, in short transactions of its own: insert the in-flight record, or decide from the existing one. */
  private async claim(scope: string, key: string, fp: Buffer): Promise<Claim> {
    const c = await this.pool.connect();
    let broken: Error | undefined;
    try {
      for (let round = 0; round < CLAIM_ROUNDS; round++) {
        await c.query('BEGIN');
        let out: Claim | undefined;
        try {
          out = await this.claimRound(c, scope, key, fp);
        } catch (err) {
          await c.query('ROLLBACK').catch((e: Error) => (broken = e));
          if ((err as { code?: string }).code === LOCK_NOT_AVAILABLE) return { outcome: 'in_flight' };
          throw err;
        }
        if (!out) {
          await c.query('ROLLBACK');
          continue; // deleted meanwhile, or being inserted: try again
        }
        await c.query('COMMIT');
        return out;
      }
      return { outcome: 'in_flight' };
    } catch (err) {
      broken = err as Error;
      throw err;
    } finally {
      c.release(broken);
    }
  }

  /**
   * The claim inside the open transaction of c, the one the handler then
   * runs in (inTransaction): the record is written uncommitted, so it
   * commits with the handler's effect or not at all. Rejects with code
   * 55P03 (the transaction aborted) when the record is locked.
   */
  private async claimIn(c: ReceiverClient, scope: string, key: string, fp: Buffer): Promise<Claim> {
    for (let round = 0; round < CLAIM_ROUNDS; round++) {
      const out = await this.claimRound(c, scope, key, fp);
      if (out) return out;
    }
    return { outcome: 'in_flight' };
  }

  /**
   * One round of the claim in c's transaction; undefined when there was no
   * record to decide from (try again). The insert happens only while holding
   * the key's claim lock (the same one as the Go and Python receivers'): a
   * record being inserted by an open inTransaction run holds it, so a
   * concurrent request answers in-flight instead of waiting for that run.
   */
  private async claimRound(c: ReceiverClient, scope: string, key: string, fp: Buffer): Promise<Claim | undefined> {
    const t = this.table;
    const ins = await c.query(
      `INSERT INTO ${t} (scope, key, fingerprint, state, locked_until, expires_at)
       SELECT $1, $2, $3, 'in_flight', now() + $4::bigint * interval '1 microsecond',
              now() + $5::bigint * interval '1 microsecond'
       WHERE pg_try_advisory_xact_lock(hashtextextended($6::text || chr(10) || $1::text || chr(10) || $2::text, 0))
       ON CONFLICT (scope, key) DO NOTHING RETURNING locked_until::text AS token`,
      [scope, key, fp, this.recoveryUs, this.ttlUs, this.schema],
    );
    if (ins.rows.length === 1) return { outcome: 'claimed', token: ins.rows[0].token };
    // A plain read decides a replay, a mismatch or an in-flight answer;
    // only an overwrite (of a renewable record), a takeover or marking an
    // abandoned record reads again under the row lock (NOWAIT: a locked
    // record is being worked on right now).
    let row: any;
    for (const lock of ['', ' FOR UPDATE NOWAIT']) {
      const sel = await c.query(
        `SELECT fingerprint, state, expires_at <= now() AS expired,
                coalesce(locked_until <= now(), false) AS recoverable, status, headers, body
           FROM ${t} WHERE scope = $1 AND key = $2${lock}`,
        [scope, key],
      );
      row = sel.rows[0];
      if (!row) return undefined;
      const same = Buffer.from(row.fingerprint).equals(fp);
      if (lock === '' && (renewable(row) || (same && row.state === 'in_flight' && row.recoverable))) continue;
      break;
    }
    if (renewable(row)) {
      // An expired key is a new first request, unless its first request is
      // still running (see renewable).
      const u = await c.query(
        `UPDATE ${t} SET fingerprint = $3, state = 'in_flight',
           locked_until = now() + $4::bigint * interval '1 microsecond', status = NULL, headers = NULL,
           body = NULL, created_at = now(), completed_at = NULL,
           expires_at = now() + $5::bigint * interval '1 microsecond'
         WHERE scope = $1 AND key = $2 RETURNING locked_until::text AS token`,
        [scope, key, fp, this.recoveryUs, this.ttlUs],
      );
      return { outcome: 'claimed', token: u.rows[0].token };
    }
    if (!Buffer.from(row.fingerprint).equals(fp)) return { outcome: 'mismatch' };
    if (row.state === 'completed') {
      return {
        outcome: 'replay',
        answer: { status: row.status ?? 200, headers: row.headers ?? {}, body: Buffer.from(row.body ?? []) },
      };
    }
    if (row.state === 'outcome_unknown') return { outcome: 'outcome_unknown' };
    if (!row.recoverable) return { outcome: 'in_flight' };
    if (this.rerunAbandoned) {
      // The first request's process stopped mid-run and the service
      // declared the handler safe to run again: take the record over.
      const u = await c.query(
        `UPDATE ${t} SET locked_until = now() + $3::bigint * interval '1 microsecond'
         WHERE scope = $1 AND key = $2 RETURNING locked_until::text AS token`,
        [scope, key, this.recoveryUs],
      );
      return { outcome: 'claimed', token: u.rows[0].token, abandoned: true };
    }
    // Its effect may exist: keep the record for a person. locked_until
    // stays, so a first handler that was only cut off from the database can
    // still complete (or release) it.
    await c.query(`UPDATE ${t} SET state = 'outcome_unknown' WHERE scope = $1 AND key = $2`, [scope, key]);
    return { outcome: 'outcome_unknown', abandoned: true };
  }

  private async complete(
    q: { query: ReceiverClient['query'] },
    scope: string,
    key: string,
    token: string,
    a: Stored,
  ): Promise<boolean> {
    const r = await q.query(
      `UPDATE ${this.table} SET state = 'completed', locked_until = NULL, status = $4, headers = $5::jsonb,
         body = $6, completed_at = now()
       WHERE scope = $1 AND key = $2 AND state IN ('in_flight', 'outcome_unknown') AND locked_until = $3::timestamptz`,
      [scope, key, token, a.status, JSON.stringify(a.headers), a.body],
    );
    return r.rowCount === 1;
  }

  private async release(scope: string, key: string, token: string): Promise<void> {
    try {
      await this.pool.query(
        `DELETE FROM ${this.table} WHERE scope = $1 AND key = $2 AND state IN ('in_flight', 'outcome_unknown')
           AND locked_until = $3::timestamptz`,
        [scope, key, token],
      );
    } catch {
      // The record expires after the recovery timeout instead.
    }
  }
}

/**
 * Whether an expired record makes the request a new first request (as the
 * Go receiver's renewable): a completed or outcome_unknown record, or an
 * in-flight one past its recovery deadline (its process stopped). An
 * in-flight record whose deadline is ahead is still running (its deadline
 * moves forward while the handler runs) and answers as it did before its
 * TTL passed; overwriting it would run the handler a second time beside
 * the first.
 */
function renewable(row: { expired: boolean; state: string; recoverable: boolean }): boolean {
  return row.expired && (row.state !== 'in_flight' || row.recoverable);
}

function headerValues(req: IncomingMessage, name: string): string[] {
  const out: string[] = [];
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if ((raw[i] ?? '').toLowerCase() === name) out.push(raw[i + 1] ?? '');
  }
  return out;
}

/** A fresh IncomingMessage carrying req's head and the body already read. */
function replayRequest(req: IncomingMessage, body: Buffer): IncomingMessage {
  const r = new IncomingMessage(req.socket);
  r.method = req.method;
  r.url = req.url;
  r.headers = req.headers;
  r.rawHeaders = req.rawHeaders;
  r.httpVersion = req.httpVersion;
  r.httpVersionMajor = req.httpVersionMajor;
  r.httpVersionMinor = req.httpVersionMinor;
  r.complete = true; // else ending it would destroy the shared socket
  r.push(body);
  r.push(null);
  return r;
}

/**
 * Creates a receiver storing its records through a node-postgres Pool.
 * Call migrate() once at startup, then serve wrap(handler) or use
 * middleware().
 */
export function createReceiver(pool: ReceiverPool, options: ReceiverOptions = {}): Receiver {
  return new ReceiverImpl(pool, options);
}
