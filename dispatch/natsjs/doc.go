// Package natsjs is the "nats" adapter: it publishes each outbox row to a
// NATS JetStream subject and waits for the stream's acknowledgement.
//
// The message data is the row's payload; its headers are Nats-Msg-Id and
// Idempotency-Key (both the row key) and X-Agent-Idempotency-Tuple (the
// base64url canonical tuple, docs/reference.md §5). JetStream drops a message whose
// Nats-Msg-Id it has stored within the stream's duplicate window and answers
// with "duplicate": such an attempt is a Replay. The window is the adapter's
// key TTL: KeyTTL reads it from the server, at start and then every minute
// (dispatch/builtin), so a window an operator shortens while the daemon runs
// bounds the key-TTL guard within a minute.
//
// The subject may contain {tool_name} as one whole token
// ("agents.{tool_name}.intents"); a row whose tool name is not a valid
// subject token (it holds '.', whitespace, or is a lone '*' or '>') is
// Terminal. When Config.Stream is set, New checks that this stream captures
// the subject, and every publish carries Nats-Expected-Stream, so that a
// subject captured by some other stream is refused rather than stored there.
//
// Outcomes, beyond Success and Replay:
//
//   - no stream captures the subject (no responders), the expected stream
//     differs, the stream is sealed, JetStream is disabled: Retry with
//     NotSent. These are configuration problems: rows wait for a fix instead
//     of failing, and the breaker and the dispatch metrics show them.
//   - not connected, reconnecting, or closed: Retry with NotSent. The
//     connection never buffers publishes while reconnecting, so a publish
//     that failed this way cannot be sent later behind the caller's back.
//   - payload or headers above the server's max_payload or the stream's
//     max_msg_size: Terminal.
//   - a 5xx answer from JetStream (storage failure, no leader, a full
//     stream that discards new messages): Retry with Refused: the stream
//     refused to store the message, and the attempt counts, so a stream
//     that refuses every time fails the row at its route's max_attempts.
//   - the same message id being stored by another attempt: Retry with
//     NotSent.
//   - no acknowledgement before the deadline: Ambiguous (the message may be
//     stored; a retry with the same key inside the window is a Replay).
//
// A duplicate acknowledgement for a message whose stored data differs from
// the payload (read back from the stream when it still holds it) is Terminal
// with reason payload_mismatch.
//
// # Starting
//
// KeyTTL reads the key TTL from the stream; with Config.RequireStream (a
// config that leaves key_ttl unset) New fails when no stream captures the
// subject. A server New cannot reach is an error wrapping
// dispatch.ErrUnavailable. Built from a config with key_ttl (`drainer
// run`), such an adapter starts anyway: StartInBackground keeps trying
// (Probe), and until the server answers, rows are held back without an
// attempt (dispatch.ReasonNotReady) and Ready reports false. Without
// key_ttl the start fails with ErrUnavailable, which the daemon waits out.
package natsjs
