import { type TupleField } from './errors.js';
/** Prefix of the keys of the first (and current) key scheme. */
export declare const KEY_PREFIX = "idem_v1_";
/** The largest accepted size of one tuple field, in bytes of UTF-8. */
export declare const MAX_FIELD_BYTES = 1024;
/** Identifies one intent of an agent run. */
export interface Tuple {
    /** The orchestration root: stable for the whole run, across retries and workers. */
    agentRunId: string;
    /** The position in the plan: stable across replays of the same step. */
    stepId: string;
    /** The tool to call; drainer routes by it. */
    toolName: string;
    /** What the call is about (e.g. "invoice:inv_555"); may be "". */
    businessScope: string;
}
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
export declare function canonicalTuple(tuple: Tuple): string;
/**
 * The idempotency key of a tuple: "idem_v1_" + the first 32 lowercase hex
 * digits of SHA-256 over the UTF-8 bytes of canonicalTuple(tuple). Accepts
 * any strings (including empty ones); use validateTuple for the enqueue
 * rules. Throws InvalidTupleError only when a field is not a string.
 */
export declare function idempotencyKey(tuple: Tuple): string;
/**
 * The canonical form as unpadded base64url: the value of the
 * X-Agent-Idempotency-Tuple header drainer sends, from which a provider
 * can recompute the key.
 */
export declare function encodedTuple(tuple: Tuple): string;
/**
 * Applies the enqueue rules of docs/reference.md §1 and throws InvalidTupleError
 * naming every invalid field: agentRunId, stepId and toolName are non-empty;
 * every field is a string that is valid UTF-8 (no lone surrogate), has no
 * NUL character and is at most MAX_FIELD_BYTES bytes in UTF-8; businessScope
 * may be empty.
 */
export declare function validateTuple(tuple: Tuple): void;
/** What is wrong with one tuple field, or undefined when it is valid. */
export declare function fieldProblem(field: TupleField, value: unknown): string | undefined;
/** The index of the first lone surrogate of s, or -1 when s is well-formed. */
export declare function loneSurrogateIndex(s: string): number;
/** A short description of a value's type for messages (never the value). */
export declare function describeType(value: unknown): string;
