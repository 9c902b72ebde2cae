package main

import (
	"strings"
	"testing"
)

func TestResolveCommand(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	k := d.enqueue("run-1", "charge_card", 2)
	d.set(k[0], "outcome_unknown", 1)

	code, _, errb := d.run("resolve", k[0], "--note", "checked", "--actor", "alice")
	want(t, code, errb, 2, "--outcome succeeded|failed is required")
	code, _, errb = d.run("resolve", k[1], "--note", "checked", "--outcome", "failed", "--actor", "alice")
	want(t, code, errb, 1, "cannot resolve "+k[1]+": it is pending")

	code, out, errb := d.run("resolve", k[0], "--note", "no charge at the provider", "--outcome", "failed", "--actor", "alice")
	want(t, code, errb, 0)
	if !strings.Contains(out, "resolved "+k[0]+": outcome_unknown → failed") || !strings.Contains(out, "1 never-attempted row(s) cancelled") {
		t.Fatalf("resolve output:\n%s", out)
	}
	if d.status(k[1]) != "cancelled" {
		t.Fatal("the run was not aborted")
	}
}
