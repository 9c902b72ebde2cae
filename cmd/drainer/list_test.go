package main

import (
	"strings"
	"testing"
)

func TestListCommand(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	k := d.enqueue("run-1", "charge_card", 3)
	d.set(k[2], "failed", 12) // aborts run-1: k[0] and k[1] are cancelled
	d.exec(`UPDATE drainer.outbox SET last_error = repeat('x', 100) || E'\nsecond line' WHERE key = $1`, k[1])

	code, out, errb := d.run("list")
	want(t, code, errb, 0)
	checkAligned(t, out)
	if !strings.Contains(out, k[0]) || !strings.Contains(out, "xxx…") || strings.Contains(out, "second line") {
		t.Errorf("table:\n%s", out)
	}

	code, out, errb = d.run("list", "--limit", "2")
	want(t, code, errb, 0)
	if !strings.Contains(out, "more rows: add --after-seq 2") {
		t.Errorf("no next-page hint:\n%s", out)
	}
	code, out, errb = d.run("list", "--after-seq", "2", "--output", "json")
	want(t, code, errb, 0)
	var rows []map[string]any
	decode(t, out, &rows)
	if len(rows) != 1 || rows[0]["key"] != k[2] || rows[0]["status"] != "failed" || rows[0]["attempts"] != 12.0 {
		t.Fatalf("json rows = %v", rows)
	}
	for _, f := range []string{"key", "seq", "agent_run_id", "step_id", "tool_name", "business_scope", "kind", "payload",
		"status", "attempts", "next_attempt_at", "last_error", "response", "response_status", "created_at", "updated_at"} {
		if _, ok := rows[0][f]; !ok {
			t.Errorf("json lacks %q", f)
		}
	}

	code, out, errb = d.run("list", "--status", "failed", "--run", "run-1", "--tool", "charge_card", "--output", "json", "--limit", "1")
	want(t, code, errb, 0)
	decode(t, out, &rows)
	if len(rows) != 1 || errb != "" {
		t.Fatalf("filtered: %v; stderr %q", rows, errb)
	}
	code, out, _ = d.run("list", "--status", "compensated")
	if code != 0 || strings.TrimSpace(out) != "no rows match" {
		t.Fatalf("empty list: %d %q", code, out)
	}
	code, out, _ = d.run("list", "--older-than", "1d", "--output", "json")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("older-than: %d %q", code, out)
	}
}
