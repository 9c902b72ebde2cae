// @drainer/client: the TypeScript producer library of drainer (docs/reference.md §9).
// Agents record "call this tool" intents in their own Postgres transaction;
// the drainer daemon dispatches them with a stable idempotency key.

export {
  KEY_PREFIX,
  MAX_FIELD_BYTES,
  canonicalTuple,
  encodedTuple,
  idempotencyKey,
  validateTuple,
  type Tuple,
} from './key.js';
export { DEFAULT_MAX_PAYLOAD_BYTES, JSONString, serializePayload } from './payload.js';
export {
  DEFAULT_SCHEMA,
  PARKED_STATUSES,
  TERMINAL_STATUSES,
  enqueue,
  isParked,
  isTerminal,
  result,
  waitFor,
  type EnqueueOptions,
  type EnqueueResult,
  type Queryable,
  type Result,
  type SchemaOptions,
  type Status,
  type WaitOptions,
} from './client.js';
export {
  currentAgentStep,
  outboxTool,
  withAgentStep,
  type AgentStep,
  type OutboxTool,
  type OutboxToolOptions,
} from './tool.js';
export {
  ConnectionClosedError,
  DrainerError,
  InvalidTupleError,
  PayloadError,
  PayloadTooLargeError,
  UsageError,
  WaitTimeoutError,
  type TupleField,
  type TupleProblem,
} from './errors.js';

/**
 * Whether an error is drainer.enqueue's refusal of a tuple already enqueued
 * with a different payload: node-postgres' DatabaseError with SQLSTATE 23505.
 */
export function isPayloadMismatch(err: unknown): boolean {
  return (
    err instanceof Error &&
    (err as { code?: unknown }).code === '23505' &&
    err.message.includes('already enqueued with a different payload')
  );
}
