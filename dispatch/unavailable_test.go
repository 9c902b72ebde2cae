package dispatch

import (
	"errors"
	"fmt"
	"testing"
)

func TestUnavailable(t *testing.T) {
	down := MarkUnavailable(errors.New("mcp initialize: connection refused"))
	if down.Error() != "mcp initialize: connection refused" {
		t.Errorf("MarkUnavailable changed the message: %q", down)
	}
	wrong := errors.New("route x: the MCP server has no tool \"x\"")
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"marked", down, true},
		{"marked, wrapped with a location", fmt.Errorf("c.yaml:5: adapters.a: %w", down), true},
		{"config problem", wrong, false},
		{"every adapter unreachable", errors.Join(fmt.Errorf("a: %w", down), fmt.Errorf("b: %w", down)), true},
		{"one unreachable, one misconfigured", errors.Join(fmt.Errorf("a: %w", down), wrong), false},
		{"empty join", errors.Join(), false},
	} {
		if got := Unavailable(tt.err); got != tt.want {
			t.Errorf("%s: Unavailable = %v, want %v", tt.name, got, tt.want)
		}
	}
}
