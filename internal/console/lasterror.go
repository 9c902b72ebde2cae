package console

import (
	"regexp"
)

// Classes of a row's last_error on the pages: a fault (red) or flow
// control (information: the row merely waits its turn).
const (
	classFault = "err"
	classInfo  = "info"
)

// LastError is a row's last_error as the pages show it.
type LastError struct {
	// Class is classFault or classInfo (the CSS class).
	Class string
	// Text is what the page says; Raw is last_error itself (the title).
	Text string
	Raw  string
}

// backpressure matches the hand-back of a row its adapter's gate turned
// away for flow control: the adapter at its concurrency cap (max_concurrency,
// or the share of the workers an adapter without one may use) or at its
// rate_limit. The row consumed no attempt and goes out once there is room:
// normal operation, not a fault. A breaker open, an auth hold or an
// unreachable provider stay faults.
var backpressure = regexp.MustCompile(`^adapter ("(?:[^"\\]|\\.)*") is at (max_concurrency|its rate_limit); no attempt consumed$`)

// describeLastError classifies a row's last_error for the pages.
func describeLastError(p *string) LastError {
	if p == nil || *p == "" {
		return LastError{Class: classFault}
	}
	raw := *p
	m := backpressure.FindStringSubmatch(raw)
	if m == nil {
		return LastError{Class: classFault, Text: raw, Raw: raw}
	}
	text := "adapter " + m[1] + " at its concurrency cap: rows wait their turn (no attempt consumed)"
	if m[2] != "max_concurrency" {
		text = "adapter " + m[1] + " at its rate_limit: rows wait their turn (no attempt consumed)"
	}
	return LastError{Class: classInfo, Text: text, Raw: raw}
}
