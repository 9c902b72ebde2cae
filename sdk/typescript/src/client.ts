// enqueue, result and waitFor: the producer side of drainer over
// node-postgres, through the SQL functions of docs/reference.md §2.

import { Buffer } from 'node:buffer';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';

import {
  ConnectionClosedError,
  PayloadTooLargeError,
  UsageError,
  WaitTimeoutError,
} from './errors.js';
import { validateTuple, type Tuple } from './key.js';
import { DEFAULT_MAX_PAYLOAD_BYTES, serializePayload } from './payload.js';

/** The schema drainer lives in unless `drainer migrate --schema` said otherwise. */
export const DEFAULT_SCHEMA = 'drainer';

/**
 * What enqueue, result and waitFor need of a database handle: a
 * node-postgres `Client`, a `PoolClient` (from `pool.connect()`) or a
 * `Pool`. Only a client can run the enqueue in your transaction: a `Pool`
 * runs each statement on whichever connection is free, so
 * `enqueue(pool, …)` commits the intent on its own.
 */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
  /** node-postgres Client and PoolClient (not Pool): 'I' idle, 'T' in a transaction, 'E' in a failed transaction. */
  getTransactionStatus?(): string | null;
}

/** Statuses of an outbox row (docs/reference.md §2). */
export type Status =
  | 'pending'
  | 'in_flight'
  | 'succeeded'
  | 'failed'
  | 'outcome_unknown'
  | 'compensated'
  | 'compensation_failed'
  | 'cancelled';

/** Statuses that never change again. */
export const TERMINAL_STATUSES: readonly Status[] = Object.freeze(['succeeded', 'failed', 'compensated', 'cancelled']);

/** Statuses that wait for a human (`drainer resolve`). */
export const PARKED_STATUSES: readonly Status[] = Object.freeze(['outcome_unknown', 'compensation_failed']);

/** Whether a status is terminal (succeeded, failed, compensated, cancelled). */
export function isTerminal(status: string): boolean {
  return (TERMINAL_STATUSES as readonly string[]).includes(status);
}

/** Whether a status is parked until a human resolves it (outcome_unknown, compensation_failed). */
export function isParked(status: string): boolean {
  return (PARKED_STATUSES as readonly string[]).includes(status);
}

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
export async function enqueue(
  client: Queryable,
  tuple: Tuple,
  payload: unknown,
  options: EnqueueOptions = {},
): Promise<EnqueueResult> {
  validateTuple(tuple);
  const maxBytes = options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
  if (!Number.isSafeInteger(maxBytes) || maxBytes <= 0) {
    throw new UsageError('enqueue: maxPayloadBytes must be a positive integer');
  }
  const json = serializePayload(payload, maxBytes);
  const schema = quoteSchema(options.schema);
  const values: unknown[] = [tuple.agentRunId, tuple.stepId, tuple.toolName, tuple.businessScope, json];
  let call = `${schema}.enqueue($1::text, $2::text, $3::text, $4::text, $5::jsonb)`;
  if (options.traceparent !== undefined) {
    if (typeof options.traceparent !== 'string' || /[^\x20-\x7e]/.test(options.traceparent)) {
      throw new UsageError('enqueue: traceparent must be a string of printable ASCII');
    }
    values.push(options.traceparent);
    call = `${schema}.enqueue($1::text, $2::text, $3::text, $4::text, $5::jsonb, $6::text)`;
  }
  const res = await run('enqueue', client, `SELECT e.key, e.created FROM ${call} AS e`, values);
  const row = res.rows[0] as { key?: unknown; created?: unknown } | undefined;
  if (row === undefined || typeof row.key !== 'string') {
    throw new UsageError(`enqueue: ${schema}.enqueue returned no key: is the schema migrated by drainer migrate?`);
  }
  return { key: row.key, created: toBool(row.created) };
}

/**
 * Reads the outcome of an intent through drainer.result: its status, the
 * provider's response and the last error, or null when no row with this key
 * is visible (not committed yet, or unknown). Pruned rows answer their final
 * status with a null response.
 */
export async function result(client: Queryable, key: string, options: SchemaOptions = {}): Promise<Result | null> {
  requireKey('result', key);
  const schema = quoteSchema(options.schema);
  const res = await run(
    'result',
    client,
    `SELECT r.status, r.response::text AS response, r.last_error FROM ${schema}.result($1::text) AS r`,
    [key],
  );
  const row = res.rows[0] as { status: string; response: string | null; last_error: string | null } | undefined;
  if (row === undefined) {
    return null;
  }
  return {
    status: row.status as Status,
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
export async function waitFor(client: Queryable, key: string, options: WaitOptions = {}): Promise<Result> {
  requireKey('waitFor', key);
  const timeoutMs = options.timeoutMs ?? 30_000;
  const minPoll = options.minPollMs ?? 50;
  const maxPoll = options.maxPollMs ?? 1000;
  for (const [name, v] of [
    ['timeoutMs', timeoutMs],
    ['minPollMs', minPoll],
    ['maxPollMs', maxPoll],
  ] as const) {
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
      throw new UsageError(`waitFor: ${name} must be a finite number of milliseconds, at least 0`);
    }
  }
  if (minPoll <= 0 || maxPoll < minPoll) {
    throw new UsageError('waitFor: need 0 < minPollMs <= maxPollMs');
  }
  const tx = transactionStatus(client);
  if (tx === 'T' || tx === 'E') {
    throw new UsageError(
      `waitFor ${key}: the client is inside a transaction; commit the transaction that enqueued first ` +
        '(the daemon cannot see an uncommitted intent), then wait outside any transaction',
    );
  }
  const deadline = performance.now() + timeoutMs;
  let delay = minPoll;
  for (;;) {
    // The timeout is given only after a read begun at or after the
    // deadline: a read that began earlier and overran it (a slow server)
    // is not the last look.
    const began = performance.now();
    const r = await result(client, key, options);
    if (r !== null && (isTerminal(r.status) || isParked(r.status))) {
      return r;
    }
    if (began >= deadline) {
      throw new WaitTimeoutError(key, timeoutMs, r === null ? null : r.status);
    }
    await sleep(Math.max(0, Math.min(delay, deadline - performance.now())));
    delay = Math.min(delay * 2, maxPoll);
  }
}

/**
 * Quotes a schema name as an SQL identifier ("..." with inner quotes
 * doubled), after checking it is a possible Postgres name: a non-empty
 * string without NUL, at most 63 bytes. Quoted names are case-sensitive:
 * `drainer migrate` creates lower-case ones.
 */
export function quoteSchema(schema: string | undefined): string {
  const name = schema ?? DEFAULT_SCHEMA;
  if (typeof name !== 'string' || name === '' || name.includes('\u0000') || Buffer.byteLength(name, 'utf8') > 63) {
    throw new UsageError('schema must be a non-empty name without NUL, at most 63 bytes (the schema of drainer migrate)');
  }
  return '"' + name.replace(/"/g, '""') + '"';
}

/** The client's transaction status ('I', 'T', 'E'), or undefined when it cannot tell (a Pool). */
export function transactionStatus(client: Queryable): string | undefined {
  if (typeof client.getTransactionStatus !== 'function') {
    return undefined;
  }
  const s = client.getTransactionStatus();
  return typeof s === 'string' ? s : undefined;
}

function requireKey(op: string, key: unknown): asserts key is string {
  if (typeof key !== 'string' || key === '') {
    throw new UsageError(`${op}: key must be a non-empty string`);
  }
}

function toBool(v: unknown): boolean {
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

async function run(op: string, client: Queryable, text: string, values: unknown[]): Promise<{ rows: unknown[] }> {
  if (client === null || typeof client !== 'object' || typeof client.query !== 'function') {
    throw new UsageError(`${op}: client must be a node-postgres Client, PoolClient or Pool`);
  }
  try {
    return await client.query(text, values);
  } catch (err) {
    throw translate(op, err);
  }
}

function translate(op: string, err: unknown): unknown {
  if (!(err instanceof Error)) {
    return err;
  }
  const code = (err as { code?: unknown }).code;
  if (code === '54000') {
    const m = PAYLOAD_LIMIT.exec(err.message);
    if (m !== null) {
      return new PayloadTooLargeError(
        Number(m[1]),
        Number(m[2]),
        `is ${m[1]} bytes as stored jsonb, more than the database's limit of ${m[2]} (setting drainer.max_payload_bytes)`,
        { cause: err },
      );
    }
  }
  if ((typeof code === 'string' && CLOSED_CODES.has(code)) || CLOSED_MESSAGES.has(err.message)) {
    return new ConnectionClosedError(op, err);
  }
  return err;
}
