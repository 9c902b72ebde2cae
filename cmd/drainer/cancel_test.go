package main

import (
	"context"
	"testing"
)

func TestCancelCommand(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	k := d.enqueue("run-1", "charge_card", 3)
	d.set(k[1], "pending", 2)
	d.exec(`UPDATE drainer.outbox SET status = 'in_flight', attempts = 1, lease_token = gen_random_uuid(),
	        lease_expires_at = now() + interval '1 minute' WHERE key = $1`, k[2])

	code, _, errb := d.run("cancel", k[2], "--actor", "alice")
	want(t, code, errb, 1, "cannot cancel "+k[2]+": it is in_flight")

	code, out, errb := d.run("cancel", "--run", "run-1", "--actor", "alice", "--reason", "duplicate run", "--output", "json")
	want(t, code, errb, 0)
	var res map[string]any
	decode(t, out, &res)
	if res["count"] != 2.0 || res["warnings"] != 1.0 {
		t.Fatalf("cancel json = %v", res)
	}
	var lastError string
	if err := d.pool.QueryRow(context.Background(), `SELECT last_error FROM drainer.outbox WHERE key = $1`, k[0]).Scan(&lastError); err != nil {
		t.Fatal(err)
	}
	if lastError != "cancelled by alice: duplicate run" {
		t.Fatalf("last_error = %q", lastError)
	}
	code, _, errb = d.run("cancel", k[0], "--actor", "alice")
	want(t, code, errb, 1, "cannot cancel "+k[0]+": it is cancelled")
}
