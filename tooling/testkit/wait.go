package testkit

import (
	"testing"
	"time"
)

// maxPause is the longest pause between two looks at a condition.
const maxPause = 50 * time.Millisecond

// WaitFor polls cond until it holds, first every millisecond, then less
// and less often, up to every 50ms. If cond still does not hold once
// within has passed, it fails t, naming what it waited for and the state
// cond last reported.
//
// cond returns whether the awaited condition holds and, for the failure
// message, what it saw (empty when there is nothing worth saying). cond is
// looked at once more after within has passed, so a condition that holds
// by then is never a failure.
//
// within only bounds a wait that would fail anyway: give it generously, so
// that no verdict depends on the speed of the machine.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	end := time.Now().Add(within)
	pause := time.Millisecond
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(end) {
			if state == "" {
				t.Fatalf("timed out after %s waiting for %s", within, what)
			}
			t.Fatalf("timed out after %s waiting for %s; last: %s", within, what, state)
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPause)
	}
}
