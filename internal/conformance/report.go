package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Check names one probe of the replay contract (docs/reference.md §3). The
// names are stable: they start every printed line and are the "name" field
// of the JSON report.
type Check string

// The checks, in the order they run and are printed.
const (
	// CheckFirstWrite: a request with a fresh key (and its matching tuple
	// header) answers 2xx without a replay marker.
	CheckFirstWrite Check = "first-write"
	// CheckReplay: the same key and request again answers the replay status
	// (seed: 200; ietf: the first write's status), the first write's body
	// byte for byte and Content-Type, and the replay marker.
	CheckReplay Check = "replay"
	// CheckPayloadMismatch: the same key with a different body answers 409
	// with Idempotency-Conflict: payload-mismatch (ietf: 422).
	CheckPayloadMismatch Check = "payload-mismatch"
	// CheckInFlight: of N identical requests sent at once with a fresh key,
	// exactly one is a first write and every other is a replay or an
	// in-flight conflict (409 with Idempotency-Conflict: in-flight and
	// Retry-After; seed also accepts 425).
	CheckInFlight Check = "in-flight"
	// CheckOneEffect: the same bursts, counted: exactly one non-replay
	// success per key, every replay carries the first write's body, and a
	// retry after the burst replays it.
	CheckOneEffect Check = "one-effect"
	// CheckMissingKey: a request without Idempotency-Key answers 400.
	CheckMissingKey Check = "missing-key"
	// CheckTupleMismatch: a request whose X-Agent-Idempotency-Tuple does not
	// hash to its key answers 400.
	CheckTupleMismatch Check = "tuple-mismatch"
)

// Checks lists every check in the order they run.
var Checks = []Check{
	CheckFirstWrite, CheckReplay, CheckPayloadMismatch, CheckInFlight,
	CheckOneEffect, CheckMissingKey, CheckTupleMismatch,
}

// Result is the verdict of one check and what was seen. Seen never holds a
// header value the caller passed (credentials) nor a success body.
type Result struct {
	Name   Check  `json:"name"`
	Passed bool   `json:"passed"`
	Seen   string `json:"seen"`
}

// Line renders r as printed: "PASS name: seen" or "FAIL name: seen".
func (r Result) Line() string {
	verdict := "FAIL"
	if r.Passed {
		verdict = "PASS"
	}
	return verdict + " " + string(r.Name) + ": " + r.Seen
}

// Report is the outcome of one run. Its JSON field names are stable.
type Report struct {
	URL         string   `json:"url"` // password masked, query shown as ?…
	Method      string   `json:"method"`
	Mode        Mode     `json:"mode"`
	Concurrency int      `json:"concurrency"`
	Passed      bool     `json:"passed"` // every check passed
	Checks      []Result `json:"checks"`
}

// Failed returns the names of the checks that failed, in order.
func (r Report) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if !c.Passed {
			out = append(out, c.Name)
		}
	}
	return out
}

// Result returns the result of check c and whether it ran.
func (r Report) Result(c Check) (Result, bool) {
	for _, res := range r.Checks {
		if res.Name == c {
			return res, true
		}
	}
	return Result{}, false
}

// WriteText writes one line per check.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, c := range r.Checks {
		b.WriteString(c.Line())
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes r as one indented JSON object.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}
