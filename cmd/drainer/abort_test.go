package main

import (
	"strings"
	"testing"
)

func TestAbortCommand(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	d.enqueue("run-1", "charge_card", 2)
	code, out, errb := d.run("abort", "run-1", "--reason", "wrong customer", "--actor", "alice")
	want(t, code, errb, 0)
	if !strings.Contains(out, "aborted run run-1: 2 never-attempted row(s) cancelled") {
		t.Fatalf("abort output: %s", out)
	}
	code, out, errb = d.run("abort", "run-1", "--reason", "again", "--actor", "bob", "--output", "json")
	want(t, code, errb, 0)
	var res map[string]any
	decode(t, out, &res)
	if res["already_aborted"] != true || res["aborted_by"] != "alice" {
		t.Fatalf("abort json = %v", res)
	}
	code, _, errb = d.run("abort", "run-x", "--reason", "typo", "--actor", "alice")
	want(t, code, errb, 1, "no row with agent_run_id run-x")
}
