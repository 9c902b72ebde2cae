package main

import (
	"context"
	"strings"
	"testing"
)

func TestCancelCommand(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	k := d.enqueue("run-1", "charge_card", 3)
	d.set(k[1], "pending", 2)
	d.set(k[2], "in_flight", 1)
	d.exec(`UPDATE drainer.outbox SET lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute' WHERE key = $1`, k[2])

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

func TestPauseCommands(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	code, out, errb := d.run("pause")
	want(t, code, errb, 0)
	if strings.TrimSpace(out) != "nothing is paused" {
		t.Fatalf("empty pauses: %q", out)
	}
	code, _, errb = d.run("pause", "charge_card", "--reason", "provider incident", "--actor", "alice")
	want(t, code, errb, 0)
	code, _, errb = d.run("pause", "--adapter", "payments", "--actor", "alice")
	want(t, code, errb, 0)
	code, _, errb = d.run("pause", "charge_card", "--actor", "alice")
	want(t, code, errb, 1, "route charge_card is already paused")

	code, out, errb = d.run("pause")
	want(t, code, errb, 0)
	checkAligned(t, out)
	code, out, errb = d.run("pause", "--output", "json")
	want(t, code, errb, 0)
	var ps []map[string]any
	decode(t, out, &ps)
	if len(ps) != 2 || ps[0]["target"] != "route" || ps[0]["paused_by"] != "alice" {
		t.Fatalf("pauses = %v", ps)
	}

	code, _, errb = d.run("resume", "charge_card", "--actor", "alice")
	want(t, code, errb, 0)
	code, _, errb = d.run("resume", "charge_card", "--actor", "alice")
	want(t, code, errb, 1, "drainer: route charge_card is not paused")
}

func TestAuditVerifyCommand(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	k := d.enqueue("run-1", "charge_card", 2)
	d.set(k[0], "succeeded", 1)
	code, out, errb := d.run("audit", "verify")
	want(t, code, errb, 0)
	if strings.TrimSpace(out) != "audit: 3 entries in 2 chains verified" {
		t.Fatalf("verify: %q", out)
	}
	d.exec(`UPDATE drainer.audit SET actor = 'mallory' WHERE id = 1`)
	code, out, errb = d.run("audit", "verify")
	want(t, code, errb, 1, "1 broken link(s)")
	if !strings.Contains(out, "edited") || !strings.HasPrefix(strings.Split(out, "\n")[1], "1 ") {
		t.Fatalf("verify output:\n%s", out)
	}
	code, out, _ = d.run("audit", "verify", "--output", "json")
	var v map[string]any
	decode(t, out, &v)
	if code != 1 || v["ok"] != false || len(v["broken"].([]any)) != 1 {
		t.Fatalf("verify json = %v (exit %d)", v, code)
	}
}
