"use strict";
// @drainer/client: the TypeScript producer library of drainer (docs/reference.md §9).
// Agents record "call this tool" intents in their own Postgres transaction;
// the drainer daemon dispatches them with a stable idempotency key.
Object.defineProperty(exports, "__esModule", { value: true });
exports.WaitTimeoutError = exports.UsageError = exports.PayloadTooLargeError = exports.PayloadError = exports.InvalidTupleError = exports.DrainerError = exports.ConnectionClosedError = exports.withAgentStep = exports.outboxTool = exports.currentAgentStep = exports.waitFor = exports.result = exports.isTerminal = exports.isParked = exports.enqueue = exports.TERMINAL_STATUSES = exports.PARKED_STATUSES = exports.DEFAULT_SCHEMA = exports.serializePayload = exports.JSONString = exports.DEFAULT_MAX_PAYLOAD_BYTES = exports.validateTuple = exports.idempotencyKey = exports.encodedTuple = exports.canonicalTuple = exports.MAX_FIELD_BYTES = exports.KEY_PREFIX = void 0;
exports.isPayloadMismatch = isPayloadMismatch;
var key_js_1 = require("./key.js");
Object.defineProperty(exports, "KEY_PREFIX", { enumerable: true, get: function () { return key_js_1.KEY_PREFIX; } });
Object.defineProperty(exports, "MAX_FIELD_BYTES", { enumerable: true, get: function () { return key_js_1.MAX_FIELD_BYTES; } });
Object.defineProperty(exports, "canonicalTuple", { enumerable: true, get: function () { return key_js_1.canonicalTuple; } });
Object.defineProperty(exports, "encodedTuple", { enumerable: true, get: function () { return key_js_1.encodedTuple; } });
Object.defineProperty(exports, "idempotencyKey", { enumerable: true, get: function () { return key_js_1.idempotencyKey; } });
Object.defineProperty(exports, "validateTuple", { enumerable: true, get: function () { return key_js_1.validateTuple; } });
var payload_js_1 = require("./payload.js");
Object.defineProperty(exports, "DEFAULT_MAX_PAYLOAD_BYTES", { enumerable: true, get: function () { return payload_js_1.DEFAULT_MAX_PAYLOAD_BYTES; } });
Object.defineProperty(exports, "JSONString", { enumerable: true, get: function () { return payload_js_1.JSONString; } });
Object.defineProperty(exports, "serializePayload", { enumerable: true, get: function () { return payload_js_1.serializePayload; } });
var client_js_1 = require("./client.js");
Object.defineProperty(exports, "DEFAULT_SCHEMA", { enumerable: true, get: function () { return client_js_1.DEFAULT_SCHEMA; } });
Object.defineProperty(exports, "PARKED_STATUSES", { enumerable: true, get: function () { return client_js_1.PARKED_STATUSES; } });
Object.defineProperty(exports, "TERMINAL_STATUSES", { enumerable: true, get: function () { return client_js_1.TERMINAL_STATUSES; } });
Object.defineProperty(exports, "enqueue", { enumerable: true, get: function () { return client_js_1.enqueue; } });
Object.defineProperty(exports, "isParked", { enumerable: true, get: function () { return client_js_1.isParked; } });
Object.defineProperty(exports, "isTerminal", { enumerable: true, get: function () { return client_js_1.isTerminal; } });
Object.defineProperty(exports, "result", { enumerable: true, get: function () { return client_js_1.result; } });
Object.defineProperty(exports, "waitFor", { enumerable: true, get: function () { return client_js_1.waitFor; } });
var tool_js_1 = require("./tool.js");
Object.defineProperty(exports, "currentAgentStep", { enumerable: true, get: function () { return tool_js_1.currentAgentStep; } });
Object.defineProperty(exports, "outboxTool", { enumerable: true, get: function () { return tool_js_1.outboxTool; } });
Object.defineProperty(exports, "withAgentStep", { enumerable: true, get: function () { return tool_js_1.withAgentStep; } });
var errors_js_1 = require("./errors.js");
Object.defineProperty(exports, "ConnectionClosedError", { enumerable: true, get: function () { return errors_js_1.ConnectionClosedError; } });
Object.defineProperty(exports, "DrainerError", { enumerable: true, get: function () { return errors_js_1.DrainerError; } });
Object.defineProperty(exports, "InvalidTupleError", { enumerable: true, get: function () { return errors_js_1.InvalidTupleError; } });
Object.defineProperty(exports, "PayloadError", { enumerable: true, get: function () { return errors_js_1.PayloadError; } });
Object.defineProperty(exports, "PayloadTooLargeError", { enumerable: true, get: function () { return errors_js_1.PayloadTooLargeError; } });
Object.defineProperty(exports, "UsageError", { enumerable: true, get: function () { return errors_js_1.UsageError; } });
Object.defineProperty(exports, "WaitTimeoutError", { enumerable: true, get: function () { return errors_js_1.WaitTimeoutError; } });
/**
 * Whether an error is drainer.enqueue's refusal of a tuple already enqueued
 * with a different payload: node-postgres' DatabaseError with SQLSTATE 23505.
 */
function isPayloadMismatch(err) {
    return (err instanceof Error &&
        err.code === '23505' &&
        err.message.includes('already enqueued with a different payload'));
}
