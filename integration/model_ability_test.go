//go:build integration

package integration

import (
	"testing"
	"time"
)

// TestAbleDuring: the hand-over bound counts only the time some replica
// could reclaim a row; a span with every replica SIGSTOPped or cut off is
// left out, and nothing else is.
func TestAbleDuring(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	e := &modelEnv{ability: []ableChange{{at(10), false}, {at(40), true}, {at(50), false}, {at(55), true}}}
	for _, c := range []struct {
		from, to int
		want     time.Duration
	}{
		{0, 10, 10 * time.Second},  // before any change: able
		{5, 45, 10 * time.Second},  // 5–10 and 40–45
		{20, 30, 0},                // inside a span with nobody able
		{30, 60, 15 * time.Second}, // 40–50 and 55–60
		{60, 70, 10 * time.Second}, // after the last change: able
	} {
		if got := e.ableDuring(at(c.from), at(c.to)); got != c.want {
			t.Errorf("ableDuring(%d s, %d s) = %s, want %s", c.from, c.to, got, c.want)
		}
	}
	if got := (&modelEnv{}).ableDuring(at(0), at(53)); got != 53*time.Second {
		t.Errorf("with every replica able throughout: %s, want the whole 53s", got)
	}
}
