import { type Queryable } from './client.js';
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
/**
 * Runs `fn` as one step of an agent run: every outboxTool called from it
 * (however deep, across awaits) enqueues on `client` with the step's
 * agentRunId and stepId. The caller owns the transaction: BEGIN before,
 * COMMIT after (or ROLLBACK, which takes the intents back with everything
 * else). Returns what `fn` returns. `client` must be one connection (a
 * Client or a PoolClient), not a Pool.
 */
export declare function withAgentStep<T>(client: Queryable, step: AgentStep, fn: () => Promise<T> | T): Promise<T>;
/** The agent step the caller runs in, or undefined outside withAgentStep. */
export declare function currentAgentStep(): Readonly<AgentStep> | undefined;
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
export declare function outboxTool<A extends object>(toolName: string, options?: OutboxToolOptions<A>): OutboxTool<A>;
