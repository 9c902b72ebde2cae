// Package conformance is the engine of `drainer conformance`: it probes one
// HTTP endpoint for the replay contract a provider owes drainer's retries
// (docs/reference.md §3 and §11) and reports one verdict per check.
//
// Every request goes to the URL given and nowhere else (redirects are never
// followed), carries the caller's headers, and uses a fresh random key: a
// key of the idem_v1_ scheme computed from a random tuple, sent with the
// matching X-Agent-Idempotency-Tuple so an endpoint that verifies the tuple
// accepts it. The checks, in order:
//
//   - first-write: a fresh key answers 2xx, Idempotency-Replay false or absent.
//   - replay: the same request again answers 200 (ietf: the first write's
//     status) with Idempotency-Replay: true (ietf: or Idempotent-Replayed:
//     true) and the first write's body, byte for byte, and Content-Type.
//   - payload-mismatch: the same key with a different JSON body answers 409
//     with Idempotency-Conflict: payload-mismatch (ietf: 422).
//   - in-flight and one-effect: see below.
//   - missing-key: no Idempotency-Key answers 400.
//   - tuple-mismatch: a tuple header that does not hash to the key answers 400.
//
// # The in-flight answer of an endpoint nobody can slow down
//
// The checks cannot make an arbitrary endpoint's handler slow. Instead a
// burst sends N identical requests with one fresh key over N connections
// that are all open before any request is written (a dial barrier), so the
// requests arrive together and overlap the first one's handler as much as
// the network allows. in-flight then requires that exactly one answer is a
// first write and every other is a replay or a well-formed in-flight
// conflict (409 with Idempotency-Conflict: in-flight and a valid
// Retry-After; seed mode also accepts 425; ietf mode needs only the 409 and
// Retry-After). Bursts repeat with new keys, up to Options.Rounds, until one
// shows an in-flight answer. An endpoint so fast that no request ever
// overlapped its first write still passes (it answered every request
// correctly), and the line says the in-flight answer was not observed.
//
// one-effect counts effects through the same answers: exactly one non-replay
// success per key, every replay carrying the first write's body, and a retry
// after the burst (repeated while the key is in flight, honouring
// Retry-After) replaying that body too.
//
// The judges are pure functions of the answers; a failing endpoint is a
// report with failing results, never an error. Results quote no header
// value the caller passed and no success body: only statuses, the headers
// the contract names, body sizes and problem+json titles.
//
// # Files
//
//	options.go  Options, Mode, the wire names; validation (OptionError),
//	            ParseURL, ParseHeader
//	run.go      Run: the checks in order
//	probe.go    sending: one request, a burst behind a dial barrier, the
//	            settling retry, the payload variant
//	answer.go   Answer, its Kind (first write, replay, in flight, other),
//	            the in-flight shape, describe
//	judge.go    the pure judges, one per check
//	report.go   Check names, Result, Report: text lines and JSON
package conformance
