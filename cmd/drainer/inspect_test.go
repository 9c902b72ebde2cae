package main

import (
	"strings"
	"testing"
)

func TestInspectCommand(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	k := d.enqueue("run-1", "charge_card", 2)
	d.set(k[0], "failed", 3) // aborts run-1

	code, out, errb := d.run("inspect", k[0])
	want(t, code, errb, 0)
	for _, s := range []string{"payload", `{"amount": 0}`, "saga of run run-1", "rows of run run-1", "audit", "enqueued", "pending → failed"} {
		if !strings.Contains(out, s) {
			t.Errorf("inspect output lacks %q:\n%s", s, out)
		}
	}
	code, out, errb = d.run("inspect", k[0], "--output", "json")
	want(t, code, errb, 0)
	var in map[string]any
	decode(t, out, &in)
	if in["key"] != k[0] || in["status"] != "failed" || in["saga"] == nil || len(in["run_rows"].([]any)) != 2 || len(in["audit"].([]any)) != 2 {
		t.Fatalf("inspect json = %v", in)
	}

	code, _, errb = d.run("inspect", "idem_v1_00000000000000000000000000000000")
	want(t, code, errb, 1, "drainer: no row with key idem_v1_00000000000000000000000000000000")
}
