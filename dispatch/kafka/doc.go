// Package kafka is the "kafka" adapter: it produces one record per outbox
// row to a Kafka topic and waits for the acknowledgement of all in-sync
// replicas (acks=all), through franz-go's idempotent producer.
//
// The record's value is the row's payload; its key is the row's business
// scope (the aggregate id, as Debezium's outbox router keys its records),
// or the row key when the scope is empty, so one aggregate's records share
// a partition and keep their order. Headers: Idempotency-Key (the row key),
// X-Agent-Idempotency-Tuple (the base64url canonical tuple, as the http
// adapter sends it) and traceparent when the row has one (docs/reference.md
// §5). The topic is fixed or a template with {tool_name}; a row whose tool
// name makes an invalid topic name is Terminal, nothing sent. A success's
// response is {"topic", "partition", "offset"}.
//
// Kafka keeps no idempotency window across producer sessions: the
// idempotent producer only drops the duplicates of its own retries. The
// adapter remembers the keys acknowledged in this process (a row sent again
// is a Replay with the first answer, no second record) and never sends a
// key while an earlier attempt of it is still waiting for its answer; a
// restarted process or another replica retrying after a lost
// acknowledgement may still write a second copy with the same
// Idempotency-Key header, which consumers drop. The key_ttl default is
// DefaultKeyTTL (Kafka's default retention).
//
// Outcomes, beyond Success and Replay:
//
//   - not authorized (topic or cluster), SASL authentication failed, TLS
//     refused (a broker certificate the configured CA did not sign, or the
//     client's certificate refused): Auth, not sent.
//   - the topic does not exist: Retry, not sent (a configuration problem:
//     rows wait for it to be fixed; the breaker and metrics show it).
//   - record too large (above the broker's or the topic's limit, or the
//     client's batch limit), invalid record, policy violation: Terminal.
//   - a broker refusing the record for now (not enough replicas, no
//     leader, ...) on every try of the attempt: Retry, not sent; an answer
//     after which the broker may have written it (REQUEST_TIMED_OUT,
//     NOT_ENOUGH_REPLICAS_AFTER_APPEND): Ambiguous.
//   - no broker connection at all during the attempt: Retry, not sent,
//     reason connect, the last connection failure in the error.
//   - no acknowledgement before the deadline: Ambiguous.
//
// Until a broker has answered once since startup (Probe, then
// StartInBackground), rows are held back without an attempt
// (dispatch.ReasonNotReady) and Ready reports false.
//
// # Files
//
//	doc.go       this overview
//	config.go    Config, TLS, SASL: defaults, validation, the TLS files loaded
//	topic.go     the topic template and Kafka's topic name rules (also used
//	             by the config checks)
//	kafka.go     New, Probe, StartInBackground, Dispatch, Close: the record and
//	             its headers, connection tracking
//	acks.go      the keys acknowledged (and in flight) in this process
//	classify.go  a produce error to an outcome and a reason
//	logger.go    the client's warnings and errors to slog
package kafka
