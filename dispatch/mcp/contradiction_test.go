package mcp

import "testing"

// TestContradictionOfAnUnannotatedTool: a tool that gives no annotations
// has MCP's defaults (not read-only, not idempotent, destructive), so a
// naturally_idempotent route on it is a contradiction to warn of
// (docs/adapters/mcp.md); other classes are not.
func TestContradictionOfAnUnannotatedTool(t *testing.T) {
	if why := Contradiction("naturally_idempotent", nil); why == "" {
		t.Error("naturally_idempotent on a tool without annotations: no contradiction")
	}
	for _, class := range []string{"key_idempotent", "non_idempotent"} {
		if why := Contradiction(class, nil); why != "" {
			t.Errorf("%s on a tool without annotations: %q", class, why)
		}
	}
	yes := true
	if why := Contradiction("naturally_idempotent", &Annotations{IdempotentHint: &yes}); why != "" {
		t.Errorf("naturally_idempotent on an idempotent tool: %q", why)
	}
}
