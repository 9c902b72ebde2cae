"use strict";
// outboxTool and withAgentStep: tool functions that, inside an agent step,
// record their call as an intent in the step's transaction instead of
// running, so drainer dispatches it once the transaction commits.
Object.defineProperty(exports, "__esModule", { value: true });
exports.withAgentStep = withAgentStep;
exports.currentAgentStep = currentAgentStep;
exports.outboxTool = outboxTool;
const node_async_hooks_1 = require("node:async_hooks");
const errors_js_1 = require("./errors.js");
const client_js_1 = require("./client.js");
const key_js_1 = require("./key.js");
const steps = new node_async_hooks_1.AsyncLocalStorage();
/**
 * Runs `fn` as one step of an agent run: every outboxTool called from it
 * (however deep, across awaits) enqueues on `client` with the step's
 * agentRunId and stepId. The caller owns the transaction: BEGIN before,
 * COMMIT after (or ROLLBACK, which takes the intents back with everything
 * else). Returns what `fn` returns. `client` must be one connection (a
 * Client or a PoolClient), not a Pool.
 */
async function withAgentStep(client, step, fn) {
    if (client === null || typeof client !== 'object' || typeof client.query !== 'function') {
        throw new errors_js_1.UsageError('withAgentStep: client must be a node-postgres Client or PoolClient');
    }
    if (typeof client.getTransactionStatus !== 'function' && isPool(client)) {
        throw new errors_js_1.UsageError('withAgentStep: a Pool cannot hold the step\'s transaction; use a client from pool.connect() and BEGIN on it');
    }
    const problems = [];
    for (const field of ['agentRunId', 'stepId']) {
        const problem = (0, key_js_1.fieldProblem)(field, step?.[field]);
        if (problem !== undefined)
            problems.push({ field, problem });
    }
    if (problems.length > 0) {
        throw new errors_js_1.InvalidTupleError(problems);
    }
    const frozen = Object.freeze({ ...step });
    return steps.run({ client, step: frozen }, fn);
}
/** The agent step the caller runs in, or undefined outside withAgentStep. */
function currentAgentStep() {
    return steps.getStore()?.step;
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
function outboxTool(toolName, options = {}) {
    const problem = (0, key_js_1.fieldProblem)('toolName', toolName);
    if (problem !== undefined) {
        throw new errors_js_1.InvalidTupleError([{ field: 'toolName', problem }]);
    }
    if (options.scope !== undefined && typeof options.scope !== 'function') {
        throw new errors_js_1.UsageError(`outboxTool ${toolName}: scope must be a function of the arguments`);
    }
    const tool = async (args) => {
        const ctx = steps.getStore();
        if (ctx === undefined) {
            throw new errors_js_1.UsageError(`outboxTool ${toolName}: called outside withAgentStep; run it as part of an agent step so its intent joins the step's transaction`);
        }
        if (args === null || typeof args !== 'object' || Array.isArray(args)) {
            throw new errors_js_1.PayloadError('payload', `tool ${toolName} takes one JSON object of arguments, not ${(0, key_js_1.describeType)(args)}`);
        }
        const { client, step } = ctx;
        if (step.requireTransaction !== false) {
            const tx = (0, client_js_1.transactionStatus)(client);
            if (tx !== undefined && tx !== 'T') {
                throw new errors_js_1.UsageError(tx === 'E'
                    ? `outboxTool ${toolName}: the step's transaction has failed; roll it back`
                    : `outboxTool ${toolName}: the client is not inside a transaction; BEGIN first so the intent commits with the step's writes (or pass requireTransaction: false to withAgentStep)`);
            }
        }
        const businessScope = options.scope === undefined ? '' : options.scope(args);
        const enqueueOptions = {};
        const schema = options.schema ?? step.schema;
        if (schema !== undefined)
            enqueueOptions.schema = schema;
        if (options.maxPayloadBytes !== undefined)
            enqueueOptions.maxPayloadBytes = options.maxPayloadBytes;
        const { key } = await (0, client_js_1.enqueue)(client, { agentRunId: step.agentRunId, stepId: step.stepId, toolName, businessScope }, args, enqueueOptions);
        return key;
    };
    Object.defineProperty(tool, 'toolName', { value: toolName, enumerable: true });
    Object.defineProperty(tool, 'name', { value: toolName });
    return tool;
}
function isPool(client) {
    const c = client;
    return typeof c.totalCount === 'number' && typeof c.idleCount === 'number' && typeof c.connect === 'function';
}
