// outboxTool and withAgentStep: tool functions that, inside an agent step,
// record their call as an intent in the step's transaction instead of
// running, so drainer dispatches it once the transaction commits.

import { AsyncLocalStorage } from 'node:async_hooks';

import { InvalidTupleError, PayloadError, UsageError, type TupleProblem } from './errors.js';
import { enqueue, transactionStatus, type Queryable } from './client.js';
import { describeType, fieldProblem } from './key.js';

/** The agent step that wrapped tools enqueue into. */
export interface AgentStep {
  /** The run's id, stable across retries of the run. */
  agentRunId: string;
  /** The step's id, stable across retries of the step. */
  stepId: string;
  /** The schema holding drainer (default "drainer"), unless the tool names one. */
  schema?: string;
  /**
   * Refuse a tool call when the client is not inside a transaction block
   * (default true): the intent must commit with the step's own writes.
   * Only checked when the client can tell (it has getTransactionStatus(), as
   * node-postgres' Client and PoolClient do).
   */
  requireTransaction?: boolean;
}

interface StepContext {
  client: Queryable;
  step: Readonly<AgentStep>;
}

const steps = new AsyncLocalStorage<StepContext>();

/**
 * Runs `fn` as one step of an agent run: every outboxTool called from it
 * (however deep, across awaits) enqueues on `client` with the step's
 * agentRunId and stepId. The caller owns the transaction: BEGIN before,
 * COMMIT after (or ROLLBACK, which takes the intents back with everything
 * else). Returns what `fn` returns. `client` must be one connection (a
 * Client or a PoolClient), not a Pool.
 */
export async function withAgentStep<T>(client: Queryable, step: AgentStep, fn: () => Promise<T> | T): Promise<T> {
  if (client === null || typeof client !== 'object' || typeof client.query !== 'function') {
    throw new UsageError('withAgentStep: client must be a node-postgres Client or PoolClient');
  }
  if (typeof client.getTransactionStatus !== 'function' && isPool(client)) {
    throw new UsageError(
      'withAgentStep: a Pool cannot hold the step\'s transaction; use a client from pool.connect() and BEGIN on it',
    );
  }
  const problems: TupleProblem[] = [];
  for (const field of ['agentRunId', 'stepId'] as const) {
    const problem = fieldProblem(field, step?.[field]);
    if (problem !== undefined) problems.push({ field, problem });
  }
  if (problems.length > 0) {
    throw new InvalidTupleError(problems);
  }
  const frozen = Object.freeze({ ...step });
  return steps.run({ client, step: frozen }, fn);
}

/** The agent step the caller runs in, or undefined outside withAgentStep. */
export function currentAgentStep(): Readonly<AgentStep> | undefined {
  return steps.getStore()?.step;
}

/** Options of outboxTool. */
export interface OutboxToolOptions<A> {
  /**
   * The business scope of a call, from its arguments (e.g.
   * `(a) => "invoice:" + a.invoiceId`); default "". Two calls of the same
   * tool in the same step must differ in scope, or they are one intent.
   */
  scope?: (args: A) => string;
  /** The schema holding drainer; default: the step's, else "drainer". */
  schema?: string;
  /** See EnqueueOptions.maxPayloadBytes. */
  maxPayloadBytes?: number;
}

/** A tool function whose calls become intents; resolves to the intent's key. */
export interface OutboxTool<A> {
  (args: A): Promise<string>;
  /** The tool_name the intents carry (drainer routes by it). */
  readonly toolName: string;
}

/**
 * Wraps a tool for the outbox: the returned function, called inside
 * withAgentStep, does not run the tool; it enqueues the call in the step's
 * transaction, with tuple (step's agentRunId, step's stepId, toolName,
 * scope(args)) and payload = args (one JSON object), and resolves to the
 * intent's key. drainer calls the provider once the transaction commits;
 * read the outcome with waitFor(client, key).
 *
 * Called outside withAgentStep, or (by default) on a client that is not in
 * a transaction, it throws UsageError and enqueues nothing. Calling it
 * again with the same arguments in the same step is the same intent
 * (created: false); with different arguments and the same scope it is
 * node-postgres' 23505 error.
 */
export function outboxTool<A extends object>(toolName: string, options: OutboxToolOptions<A> = {}): OutboxTool<A> {
  const problem = fieldProblem('toolName', toolName);
  if (problem !== undefined) {
    throw new InvalidTupleError([{ field: 'toolName', problem }]);
  }
  if (options.scope !== undefined && typeof options.scope !== 'function') {
    throw new UsageError(`outboxTool ${toolName}: scope must be a function of the arguments`);
  }
  const tool = async (args: A): Promise<string> => {
    const ctx = steps.getStore();
    if (ctx === undefined) {
      throw new UsageError(
        `outboxTool ${toolName}: called outside withAgentStep; run it as part of an agent step so its intent joins the step's transaction`,
      );
    }
    if (args === null || typeof args !== 'object' || Array.isArray(args)) {
      throw new PayloadError('payload', `tool ${toolName} takes one JSON object of arguments, not ${describeType(args)}`);
    }
    const { client, step } = ctx;
    if (step.requireTransaction !== false) {
      const tx = transactionStatus(client);
      if (tx !== undefined && tx !== 'T') {
        throw new UsageError(
          tx === 'E'
            ? `outboxTool ${toolName}: the step's transaction has failed; roll it back`
            : `outboxTool ${toolName}: the client is not inside a transaction; BEGIN first so the intent commits with the step's writes (or pass requireTransaction: false to withAgentStep)`,
        );
      }
    }
    const businessScope = options.scope === undefined ? '' : options.scope(args);
    const enqueueOptions: { schema?: string; maxPayloadBytes?: number } = {};
    const schema = options.schema ?? step.schema;
    if (schema !== undefined) enqueueOptions.schema = schema;
    if (options.maxPayloadBytes !== undefined) enqueueOptions.maxPayloadBytes = options.maxPayloadBytes;
    const { key } = await enqueue(
      client,
      { agentRunId: step.agentRunId, stepId: step.stepId, toolName, businessScope },
      args,
      enqueueOptions,
    );
    return key;
  };
  Object.defineProperty(tool, 'toolName', { value: toolName, enumerable: true });
  Object.defineProperty(tool, 'name', { value: toolName });
  return tool as OutboxTool<A>;
}

function isPool(client: object): boolean {
  const c = client as { totalCount?: unknown; idleCount?: unknown; connect?: unknown };
  return typeof c.totalCount === 'number' && typeof c.idleCount === 'number' && typeof c.connect === 'function';
}
