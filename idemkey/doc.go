// Package idemkey derives the stable idempotency key of an agent intent from its
// four-tuple (agent_run_id, step_id, tool_name, business_scope).
//
// The key is "idem_v1_" followed by the first 32 lowercase hex characters of the
// SHA-256 of the tuple's canonical JSON form: an object with the four fields in
// sorted order, no whitespace, strings escaped as RFC 8785 (JCS) does. The SQL
// function <schema>.idempotency_key computes the same bytes; both are checked
// against testdata/key-vectors.json. The scheme never changes: a future one
// gets a new prefix and old rows keep their key.
//
// # Files
//
//	idemkey.go  Tuple: Canonical, Key, Encoded (the X-Agent-Idempotency-Tuple
//	            header), Validate (the enqueue rules); RFC 8785 string escaping
package idemkey
