package suggest

import "testing"

func TestClosest(t *testing.T) {
	tools := []string{"refund_card", "charge_card", "send_email"}
	for _, c := range []struct{ name, want string }{
		{"chrage_card", "charge_card"}, // a transposition: two edits
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
	if got := Closest("postgresq", []string{"postgresql", "postgres"}); got != "postgresql" {
		t.Errorf("a tie answered %q; want the first candidate, postgresql", got)
	}
}
