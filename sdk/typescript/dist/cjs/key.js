"use strict";
// The idempotency key of an intent (docs/reference.md §1), byte for byte the same as
// the Go package idemkey and the SQL function <schema>.idempotency_key.
Object.defineProperty(exports, "__esModule", { value: true });
exports.MAX_FIELD_BYTES = exports.KEY_PREFIX = void 0;
exports.canonicalTuple = canonicalTuple;
exports.idempotencyKey = idempotencyKey;
exports.encodedTuple = encodedTuple;
exports.validateTuple = validateTuple;
exports.fieldProblem = fieldProblem;
exports.loneSurrogateIndex = loneSurrogateIndex;
exports.describeType = describeType;
const node_crypto_1 = require("node:crypto");
const node_buffer_1 = require("node:buffer");
const errors_js_1 = require("./errors.js");
/** Prefix of the keys of the first (and current) key scheme. */
exports.KEY_PREFIX = 'idem_v1_';
/** The largest accepted size of one tuple field, in bytes of UTF-8. */
exports.MAX_FIELD_BYTES = 1024;
const FIELDS = ['agentRunId', 'stepId', 'toolName', 'businessScope'];
/**
 * The canonical JSON text the key hashes: an object with the four fields
 * under their contract names in sorted order (agent_run_id, business_scope,
 * step_id, tool_name: sorted by UTF-16 code units, as RFC 8785 wants), no
 * whitespace, strings escaped as RFC 8785 (JCS) does.
 *
 * For well-formed strings JSON.stringify escapes exactly as JCS: `\"`, `\\`,
 * `\b \f \n \r \t`, other code points below U+0020 as `\u00xx` (lowercase),
 * everything else (U+007F, U+2028, non-ASCII) raw. A lone surrogate, which
 * has no UTF-8 form, is written as its `\udxxx` escape (what JSON.stringify
 * does): the key stays defined and distinct from the key of every
 * well-formed tuple, but no such tuple can be enqueued (validateTuple
 * refuses it) and the Go and SQL functions have no string to compare it with.
 */
function canonicalTuple(tuple) {
    requireStrings(tuple);
    return ('{"agent_run_id":' +
        JSON.stringify(tuple.agentRunId) +
        ',"business_scope":' +
        JSON.stringify(tuple.businessScope) +
        ',"step_id":' +
        JSON.stringify(tuple.stepId) +
        ',"tool_name":' +
        JSON.stringify(tuple.toolName) +
        '}');
}
/**
 * The idempotency key of a tuple: "idem_v1_" + the first 32 lowercase hex
 * digits of SHA-256 over the UTF-8 bytes of canonicalTuple(tuple). Accepts
 * any strings (including empty ones); use validateTuple for the enqueue
 * rules. Throws InvalidTupleError only when a field is not a string.
 */
function idempotencyKey(tuple) {
    const digest = (0, node_crypto_1.createHash)('sha256').update(canonicalTuple(tuple), 'utf8').digest('hex');
    return exports.KEY_PREFIX + digest.slice(0, 32);
}
/**
 * The canonical form as unpadded base64url: the value of the
 * X-Agent-Idempotency-Tuple header drainer sends, from which a provider
 * can recompute the key.
 */
function encodedTuple(tuple) {
    return node_buffer_1.Buffer.from(canonicalTuple(tuple), 'utf8').toString('base64url');
}
/**
 * Applies the enqueue rules of docs/reference.md §1 and throws InvalidTupleError
 * naming every invalid field: agentRunId, stepId and toolName are non-empty;
 * every field is a string that is valid UTF-8 (no lone surrogate), has no
 * NUL character and is at most MAX_FIELD_BYTES bytes in UTF-8; businessScope
 * may be empty.
 */
function validateTuple(tuple) {
    const problems = [];
    for (const field of FIELDS) {
        const problem = fieldProblem(field, fieldOf(tuple, field));
        if (problem !== undefined) {
            problems.push({ field, problem });
        }
    }
    if (problems.length > 0) {
        throw new errors_js_1.InvalidTupleError(problems);
    }
}
/** What is wrong with one tuple field, or undefined when it is valid. */
function fieldProblem(field, value) {
    if (typeof value !== 'string') {
        return `must be a string, not ${describeType(value)}`;
    }
    if (value === '' && field !== 'businessScope') {
        return 'must not be empty';
    }
    const surrogate = loneSurrogateIndex(value);
    if (surrogate >= 0) {
        return `is not valid UTF-8: lone surrogate U+${value.charCodeAt(surrogate).toString(16).toUpperCase()} at index ${surrogate}`;
    }
    const nul = value.indexOf('\u0000');
    if (nul >= 0) {
        return `contains a NUL character at index ${nul}`;
    }
    const bytes = node_buffer_1.Buffer.byteLength(value, 'utf8');
    if (bytes > exports.MAX_FIELD_BYTES) {
        return `is ${bytes} bytes in UTF-8, more than the limit of ${exports.MAX_FIELD_BYTES}`;
    }
    return undefined;
}
/** The index of the first lone surrogate of s, or -1 when s is well-formed. */
function loneSurrogateIndex(s) {
    for (let i = 0; i < s.length; i++) {
        const c = s.charCodeAt(i);
        if (c < 0xd800 || c > 0xdfff) {
            continue;
        }
        if (c <= 0xdbff && i + 1 < s.length) {
            const d = s.charCodeAt(i + 1);
            if (d >= 0xdc00 && d <= 0xdfff) {
                i++;
                continue;
            }
        }
        return i;
    }
    return -1;
}
/** A short description of a value's type for messages (never the value). */
function describeType(value) {
    if (value === null)
        return 'null';
    if (Array.isArray(value))
        return 'an array';
    switch (typeof value) {
        case 'undefined':
            return 'undefined';
        case 'object': {
            const name = value.constructor?.name;
            return name && name !== 'Object' ? `a ${name}` : 'an object';
        }
        case 'bigint':
            return 'a BigInt';
        default:
            return `a ${typeof value}`;
    }
}
function fieldOf(tuple, field) {
    return tuple === null || typeof tuple !== 'object' ? undefined : tuple[field];
}
function requireStrings(tuple) {
    const problems = [];
    for (const field of FIELDS) {
        const value = fieldOf(tuple, field);
        if (typeof value !== 'string') {
            problems.push({ field, problem: `must be a string, not ${describeType(value)}` });
        }
    }
    if (problems.length > 0) {
        throw new errors_js_1.InvalidTupleError(problems);
    }
}
