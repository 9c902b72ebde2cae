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

	code, _, errb := d.run("cancel", k[2], "--actor", "alice", "--reason", "stale")
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
	code, _, errb = d.run("cancel", k[0], "--actor", "alice", "--reason", "again")
	want(t, code, errb, 1, "cannot cancel "+k[0]+": it is cancelled")
}

// TestCancelNeedsReason: cancel without --reason (or with a blank one) is a
// usage error that changes nothing; with it, the reason and actor reach the
// row's audit entry as for every other action.
func TestCancelNeedsReason(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	k := d.enqueue("run-1", "charge_card", 2)
	for _, args := range [][]string{
		{"cancel", k[0], "--actor", "alice"},
		{"cancel", k[0], "--actor", "alice", "--reason", "  "},
		{"cancel", "--run", "run-1", "--actor", "alice"},
		{"cancel", "--run", "run-1", "--actor", "alice", "--dry-run"},
	} {
		code, _, errb := d.run(args...)
		want(t, code, errb, 2, "--reason is required")
	}
	if d.status(k[0]) != "pending" || d.status(k[1]) != "pending" {
		t.Fatalf("a refused cancel changed rows: %s %s", d.status(k[0]), d.status(k[1]))
	}

	code, _, errb := d.run("cancel", k[0], "--actor", "alice", "--reason", "customer withdrew")
	want(t, code, errb, 0)
	var event, actor, reason, to string
	if err := d.pool.QueryRow(context.Background(), `SELECT event, actor, reason, to_status FROM drainer.audit
	        WHERE key = $1 ORDER BY id DESC LIMIT 1`, k[0]).Scan(&event, &actor, &reason, &to); err != nil {
		t.Fatal(err)
	}
	if event != "operator:cancel" || actor != "alice" || reason != "customer withdrew" || to != "cancelled" {
		t.Fatalf("audit entry = %s %s %q → %s", event, actor, reason, to)
	}
}
