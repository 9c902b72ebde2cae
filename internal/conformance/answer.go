package conformance

import (
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/drainer-io/drainer/dispatch"
)

// maxBody bounds the bytes read of one answer's body.
const maxBody = 1 << 20

// Answer is what one request got: an HTTP answer, or Err when none came.
type Answer struct {
	Status    int
	Header    http.Header
	Body      []byte
	Truncated bool  // the body was longer than maxBody; Body holds its start
	Err       error // transport error: no answer
}

// Kind is how the checks read an answer.
type Kind int

const (
	KindFirstWrite Kind = iota // 2xx without a replay marker
	KindReplay                 // 2xx with a replay marker drainer recognises
	KindInFlight               // an in-flight conflict, as the mode wants it
	KindOther                  // anything else (an error, a malformed conflict)
)

// replayMarked reports whether a carries a replay marker drainer counts
// (docs/reference.md §5): Idempotency-Replay: true or Idempotent-Replayed: true.
func (a Answer) replayMarked() bool {
	out, _ := dispatch.ClassifyHTTP(a.Status, a.Header)
	return a.Err == nil && out == dispatch.Replay
}

// success reports whether a is a 2xx answer.
func (a Answer) success() bool { return a.Err == nil && a.Status >= 200 && a.Status <= 299 }

// firstWriteMarker returns "" when a's Idempotency-Replay header is absent
// or false (what a first write carries), else the offending value.
func (a Answer) firstWriteMarker() string {
	for _, name := range []string{HeaderReplay, HeaderReplayed} {
		for _, v := range a.Header.Values(name) {
			if !strings.EqualFold(strings.TrimSpace(v), "false") {
				return name + ": " + v
			}
		}
	}
	return ""
}

// classify reads a as the checks of mode m do.
func classify(m Mode, a Answer) Kind {
	switch {
	case a.Err != nil:
		return KindOther
	case a.success() && a.replayMarked():
		return KindReplay
	case a.success():
		return KindFirstWrite
	case inFlightProblem(m, a) == "":
		return KindInFlight
	}
	return KindOther
}

// inFlightProblem returns "" when a is an in-flight conflict as mode m
// wants it, else what is wrong with it.
func inFlightProblem(m Mode, a Answer) string {
	switch {
	case a.Err != nil:
		return "no answer: " + a.Err.Error()
	case m == ModeSeed && a.Status != http.StatusConflict && a.Status != http.StatusTooEarly:
		return fmt.Sprintf("status %d, not 409 (or 425)", a.Status)
	case m == ModeIETF && a.Status != http.StatusConflict:
		return fmt.Sprintf("status %d, not 409", a.Status)
	case headerIs(a.Header, HeaderConflict, ConflictMismatch):
		return "Idempotency-Conflict: payload-mismatch on an identical request"
	case m == ModeSeed && !headerIs(a.Header, HeaderConflict, ConflictInFlight):
		return "no Idempotency-Conflict: in-flight"
	}
	ra := a.Header.Get(HeaderRetryAfter)
	if ra == "" {
		return "no Retry-After"
	}
	if _, ok := dispatch.ParseRetryAfter(ra, time.Now()); !ok {
		return fmt.Sprintf("Retry-After %q is neither seconds nor an HTTP date", ra)
	}
	return ""
}

// headerIs reports whether a value of header name equals want, ignoring case
// and surrounding space.
func headerIs(h http.Header, name, want string) bool {
	for _, v := range h.Values(name) {
		if strings.EqualFold(strings.TrimSpace(v), want) {
			return true
		}
	}
	return false
}

// mediaType returns the media type of a Content-Type value, lower case,
// without parameters ("" when none or unparsable).
func mediaType(ct string) string {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return strings.ToLower(strings.TrimSpace(ct))
	}
	return mt
}

// describe renders a for a "seen" text: the status, the headers the
// contract names, and for a problem+json body its title and detail. A body
// is otherwise only measured, never quoted: it may hold data of the service.
func describe(a Answer) string {
	if a.Err != nil {
		return "no answer (" + a.Err.Error() + ")"
	}
	parts := []string{fmt.Sprintf("%d", a.Status)}
	for _, name := range []string{HeaderReplay, HeaderReplayed, HeaderConflict, HeaderRetryAfter} {
		if v := a.Header.Values(name); len(v) > 0 {
			parts = append(parts, name+": "+strings.Join(v, ", "))
		}
	}
	if ct := a.Header.Get(headerContentType); ct != "" {
		parts = append(parts, ct)
	}
	if p := dispatch.ParseProblem(a.Header.Get(headerContentType), a.Body); p != nil && (p.Title != "" || p.Detail != "") {
		text := p.Title
		if p.Title != "" && p.Detail != "" {
			text += ": "
		}
		parts = append(parts, fmt.Sprintf("%q", clip(text+p.Detail, 120)))
	} else {
		parts = append(parts, bodySize(a))
	}
	return strings.Join(parts, ", ")
}

func bodySize(a Answer) string {
	if a.Truncated {
		return fmt.Sprintf("body over %d bytes", maxBody)
	}
	return fmt.Sprintf("%d-byte body", len(a.Body))
}

// clip shortens s to at most n bytes on a rune boundary, ending with "…".
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// firstDifference returns the index of the first byte where a and b differ
// (the shorter length when one is a prefix of the other).
func firstDifference(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
