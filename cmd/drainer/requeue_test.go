package main

import (
	"strings"
	"testing"
)

func TestRequeueCommand(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	k := d.enqueue("run-1", "charge_card", 3)
	d.set(k[0], "succeeded", 1)
	d.set(k[1], "failed", 12)

	code, _, errb := d.run("requeue", k[0], "--actor", "alice")
	want(t, code, errb, 1, "drainer: cannot requeue "+k[0]+": it is succeeded (the effect happened; requeueing would repeat it)")

	code, _, errb = d.run("requeue", "idem_v1_nope", "--actor", "alice")
	want(t, code, errb, 1, "no row with key idem_v1_nope")

	code, out, errb := d.run("requeue", "--status", "failed", "--dry-run", "--actor", "alice", "--output", "json")
	want(t, code, errb, 0)
	var res map[string]any
	decode(t, out, &res)
	if res["dry_run"] != true || res["count"] != 1.0 || len(res["revived_runs"].([]any)) != 1 || d.status(k[1]) != "failed" {
		t.Fatalf("dry run = %v", res)
	}

	code, out, errb = d.run("requeue", "--status", "failed", "--dry-run", "--actor", "alice")
	want(t, code, errb, 0)
	if !strings.Contains(out, "dry run: would requeue 1 row(s)") ||
		!strings.Contains(out, "would revive 1 aborted run(s): the 1 row(s) their aborts cancelled would be pending again") {
		t.Fatalf("dry run:\n%s", out)
	}
	checkAligned(t, strings.Join(strings.Split(out, "\n")[1:3], "\n"))

	code, out, errb = d.run("requeue", k[1], "--actor", "alice", "--reason", "outage over")
	want(t, code, errb, 0)
	if !strings.Contains(out, "requeued "+k[1]+": failed → pending (attempts 12 → 0, due now)") ||
		!strings.Contains(out, "revived run run-1") || !strings.Contains(out, "the 1 row(s) its abort cancelled are pending again: "+k[2]) {
		t.Fatalf("requeue output:\n%s", out)
	}
	if d.status(k[1]) != "pending" || d.status(k[2]) != "pending" {
		t.Fatal("requeue did not happen")
	}
}

func TestRequeueBulkRefusalsExitOne(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	a := d.enqueue("run-a", "charge_card", 1)
	b := d.enqueue("run-b", "charge_card", 1)
	d.set(a[0], "failed", 2)
	d.set(b[0], "failed", 2)
	// run-b was aborted by an operator: its failed row must stay.
	d.exec(`UPDATE drainer.runs SET aborted_by = 'bob' WHERE agent_run_id = 'run-b'`)

	code, out, errb := d.run("requeue", "--status", "failed", "--actor", "alice")
	want(t, code, errb, 1, "1 matching row(s) refused")
	if !strings.Contains(out, "requeued 1 row(s)") || !strings.Contains(out, "refused 1 row(s)") || !strings.Contains(out, "aborted by bob") {
		t.Fatalf("output:\n%s", out)
	}
	if d.status(a[0]) != "pending" || d.status(b[0]) != "failed" {
		t.Fatal("wrong rows requeued")
	}
}
