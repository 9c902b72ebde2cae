package suggest

import "testing"

func TestClosest(t *testing.T) {
	tools := []string{"refund_card", "charge_card", "send_email"}
	for _, c := range []struct{ name, want string }{
		{"chrage_card", "charge_card"}, // a transposition: one edit
		{"Charge_Card", "charge_card"}, // case does not count
		{"send_emial", "send_email"},
		{"charge", ""},        // too far
		{"ab", ""},            // too short to guess
		{"reserve_stock", ""}, // nothing close
	} {
		if got := Closest(c.name, tools); got != c.want {
			t.Errorf("Closest(%q) = %q, want %q", c.name, got, c.want)
		}
	}
	// A short name with two letters swapped: one edit, within half its
	// length (counted as two edits, it was not suggested).
	if got := Closest("slwo", []string{"slow", "charge"}); got != "slow" {
		t.Errorf("Closest(slwo) = %q, want slow", got)
	}
	if got := Closest("postgresq", []string{"postgresql", "postgres"}); got != "postgresql" {
		t.Errorf("a tie answered %q; want the first candidate, postgresql", got)
	}
}
