package conformance

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// This file is the pure core: each judge turns the answers a check got into
// its Result. Nothing here sends a request.

// judgeFirstWrite: a fresh key answers 2xx without a replay marker.
func judgeFirstWrite(a Answer) Result {
	r := Result{Name: CheckFirstWrite}
	switch {
	case a.Err != nil:
		r.Seen = describe(a)
	case !a.success():
		r.Seen = describe(a) + hint(a.Status)
	case a.firstWriteMarker() != "":
		r.Seen = fmt.Sprintf("a fresh key answered as a replay (%s): %s", a.firstWriteMarker(), describe(a))
	default:
		r.Passed = true
		r.Seen = describe(a)
	}
	return r
}

// hint suggests the flag that most often explains a refused first write.
func hint(status int) string {
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return " (pass credentials with --header, e.g. Authorization=...)"
	case status == http.StatusBadRequest || status == http.StatusUnprocessableEntity:
		return " (does the endpoint accept the payload? give a valid one with --payload)"
	case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
		return " (check --url and --method)"
	}
	return ""
}

// notRun is the result of a check that needs a successful first write.
func notRun(c Check) Result {
	return Result{Name: c, Seen: "not run: needs a successful first write"}
}

// judgeReplay: the same key and request again answer the replay status,
// the marker, and the first write's body and Content-Type unchanged.
func judgeReplay(m Mode, first, again Answer) Result {
	r := Result{Name: CheckReplay}
	if !first.success() {
		return notRun(CheckReplay)
	}
	if again.Err != nil {
		r.Seen = describe(again)
		return r
	}
	want := http.StatusOK
	if m == ModeIETF {
		want = first.Status
	}
	var problems []string
	if again.Status != want {
		problems = append(problems, fmt.Sprintf("status %d, want %d", again.Status, want))
	}
	switch {
	case m == ModeSeed && !headerIs(again.Header, HeaderReplay, "true"):
		if again.replayMarked() {
			problems = append(problems, "Idempotent-Replayed: true but no Idempotency-Replay: true")
		} else {
			problems = append(problems, "no Idempotency-Replay: true")
		}
	case m == ModeIETF && !again.replayMarked():
		problems = append(problems, "no replay marker (Idempotency-Replay: true or Idempotent-Replayed: true)")
	}
	switch {
	case first.Truncated || again.Truncated:
		problems = append(problems, fmt.Sprintf("a body over %d bytes cannot be compared", maxBody))
	case !bytes.Equal(first.Body, again.Body):
		problems = append(problems, fmt.Sprintf("body differs from the first write's (%d bytes, then %d; first difference at byte %d)",
			len(first.Body), len(again.Body), firstDifference(first.Body, again.Body)))
	}
	if ct := first.Header.Get(headerContentType); ct != "" && again.Header.Get(headerContentType) != ct {
		problems = append(problems, fmt.Sprintf("Content-Type %q, the first write had %q", again.Header.Get(headerContentType), ct))
	}
	if len(problems) > 0 {
		r.Seen = strings.Join(problems, "; ") + " (" + describe(again) + ")"
		return r
	}
	r.Passed = true
	r.Seen = describe(again) + ", identical to the first write's"
	return r
}

// judgePayloadMismatch: the same key with a different body is refused: 409
// with Idempotency-Conflict: payload-mismatch (ietf: 422).
func judgePayloadMismatch(m Mode, first, a Answer) Result {
	r := Result{Name: CheckPayloadMismatch}
	if !first.success() {
		return notRun(CheckPayloadMismatch)
	}
	switch k := classify(m, a); {
	case a.Err != nil:
		r.Seen = describe(a)
	case k == KindReplay:
		r.Seen = "a different body got the stored answer (the body is not compared): " + describe(a)
	case k == KindFirstWrite:
		r.Seen = "a different body ran as a new request under the used key: " + describe(a)
	case m == ModeSeed && a.Status != http.StatusConflict:
		r.Seen = "want 409 with Idempotency-Conflict: payload-mismatch: " + describe(a)
	case m == ModeSeed && !headerIs(a.Header, HeaderConflict, ConflictMismatch):
		r.Seen = "409 without Idempotency-Conflict: payload-mismatch (drainer would retry it as in flight): " + describe(a)
	case m == ModeIETF && a.Status != http.StatusUnprocessableEntity:
		r.Seen = "want 422: " + describe(a)
	default:
		r.Passed = true
		r.Seen = describe(a)
	}
	return r
}

// burst is one round of the concurrency checks: N identical requests sent
// at once with one fresh key, then retries of that key until one is not in
// flight (settle is the last of them).
type burst struct {
	answers []Answer
	settle  Answer
}

// tally counts the kinds of a burst's answers.
type tally struct {
	first, replay, inFlight, other int
	firstBody                      []byte // the body of the (first) first write
	otherSeen                      map[string]int
}

func count(m Mode, b burst) tally {
	t := tally{otherSeen: map[string]int{}}
	for _, a := range b.answers {
		switch classify(m, a) {
		case KindFirstWrite:
			if t.first == 0 {
				t.firstBody = a.Body
			}
			t.first++
		case KindReplay:
			t.replay++
		case KindInFlight:
			t.inFlight++
		default:
			t.other++
			t.otherSeen[otherText(m, a)]++
		}
	}
	return t
}

// otherText names what is wrong with an answer that is neither a success nor
// a well-formed in-flight conflict.
func otherText(m Mode, a Answer) string {
	if a.Err == nil && (a.Status == http.StatusConflict || a.Status == http.StatusTooEarly) {
		return fmt.Sprintf("%d conflict with %s", a.Status, inFlightProblem(m, a))
	}
	return describe(a)
}

// grouped renders "3× text; 1× other text", most frequent first.
func grouped(seen map[string]int) string {
	keys := slices.Collect(maps.Keys(seen))
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(cmp.Compare(seen[b], seen[a]), cmp.Compare(a, b))
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d× %s", seen[k], k)
	}
	return strings.Join(parts, "; ")
}

func (t tally) String() string {
	return fmt.Sprintf("%d first write, %d replays, %d in flight, %d other", t.first, t.replay, t.inFlight, t.other)
}

// judgeInFlight: in every burst exactly one request is a first write and
// every other is a replay or a well-formed in-flight conflict. When no
// request overlapped the first write in any round the check passes and says
// so: the endpoint answered every request correctly, but its in-flight
// answer was not observed.
func judgeInFlight(m Mode, rounds []burst) Result {
	r := Result{Name: CheckInFlight}
	if len(rounds) == 0 {
		r.Seen = "not run"
		return r
	}
	var problems []string
	inFlight := 0
	var total tally
	for i, b := range rounds {
		t := count(m, b)
		inFlight += t.inFlight
		total.first += t.first
		total.replay += t.replay
		total.inFlight += t.inFlight
		total.other += t.other
		if t.first != 1 {
			problems = append(problems, fmt.Sprintf("round %d: %d of %d identical requests ran as first writes", i+1, t.first, len(b.answers)))
		}
		if t.other > 0 {
			problems = append(problems, fmt.Sprintf("round %d: %s", i+1, grouped(t.otherSeen)))
		}
	}
	what := fmt.Sprintf("%d round(s) of %d requests at once: %s", len(rounds), len(rounds[0].answers), total)
	switch {
	case len(problems) > 0:
		r.Seen = strings.Join(problems, "; ") + " (" + what + ")"
	case inFlight == 0:
		r.Passed = true
		r.Seen = what + "; no request overlapped the first write, so the in-flight answer itself was not observed"
	default:
		r.Passed = true
		r.Seen = what + "; every in-flight answer: " + inFlightShape(m)
	}
	return r
}

func inFlightShape(m Mode) string {
	if m == ModeIETF {
		return "409 with Retry-After"
	}
	return "409 with Idempotency-Conflict: in-flight and Retry-After"
}

// judgeOneEffect: each burst's key took effect once, as counted through the
// answers: exactly one non-replay success; every replay carries the first
// write's body; a retry after the burst replays it too.
func judgeOneEffect(m Mode, rounds []burst) Result {
	r := Result{Name: CheckOneEffect}
	if len(rounds) == 0 {
		r.Seen = "not run"
		return r
	}
	var problems []string
	for i, b := range rounds {
		t := count(m, b)
		switch {
		case t.first == 0:
			problems = append(problems, fmt.Sprintf("round %d: no request succeeded (%s)", i+1, grouped(t.otherSeen)))
			continue
		case t.first > 1:
			problems = append(problems, fmt.Sprintf("round %d: %d effects from one key (%d non-replay successes of %d requests)", i+1, t.first, t.first, len(b.answers)))
		}
		differ := 0
		for _, a := range b.answers {
			if classify(m, a) == KindReplay && !bytes.Equal(a.Body, t.firstBody) {
				differ++
			}
		}
		if differ > 0 {
			problems = append(problems, fmt.Sprintf("round %d: %d replays differ from the first write's body", i+1, differ))
		}
		switch s := b.settle; {
		case classify(m, s) != KindReplay:
			problems = append(problems, fmt.Sprintf("round %d: a retry after the burst got %s", i+1, describe(s)))
		case t.first == 1 && !bytes.Equal(s.Body, t.firstBody):
			problems = append(problems, fmt.Sprintf("round %d: a retry after the burst replayed a body other than the first write's", i+1))
		}
	}
	if len(problems) > 0 {
		r.Seen = strings.Join(problems, "; ")
		return r
	}
	r.Passed = true
	r.Seen = fmt.Sprintf("one effect per key in %d round(s) of %d requests at once; a retry after each burst replayed it", len(rounds), len(rounds[0].answers))
	return r
}

// judgeMissingKey: a request without a key answers 400.
func judgeMissingKey(a Answer) Result {
	r := Result{Name: CheckMissingKey}
	switch {
	case a.Err == nil && a.Status == http.StatusBadRequest:
		r.Passed = true
		r.Seen = describe(a)
	case a.success():
		r.Seen = "a request without Idempotency-Key ran: " + describe(a)
	default:
		r.Seen = "want 400: " + describe(a)
	}
	return r
}

// judgeTupleMismatch: a tuple header that does not hash to the key answers 400.
func judgeTupleMismatch(a Answer) Result {
	r := Result{Name: CheckTupleMismatch}
	switch {
	case a.Err == nil && a.Status == http.StatusBadRequest:
		r.Passed = true
		r.Seen = describe(a)
	case a.success():
		r.Seen = "a key that does not match its X-Agent-Idempotency-Tuple was accepted: " + describe(a)
	default:
		r.Seen = "want 400: " + describe(a)
	}
	return r
}
