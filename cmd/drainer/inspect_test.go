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

	// A row deleted outside retention: its trail and the problem, not
	// "no row".
	d.exec(`DELETE FROM drainer.outbox WHERE key = $1`, k[1])
	code, out, errb = d.run("inspect", k[1])
	want(t, code, errb, 0)
	for _, s := range []string{"none, and no tombstone", "enqueued", "AUDIT TRAIL BROKEN", "deleted outside retention, its intent lost"} {
		if !strings.Contains(out, s) {
			t.Errorf("inspect of a deleted row lacks %q:\n%s", s, out)
		}
	}
}

// TestInspectOperatorChain: the pauses and resumes of a route and an
// adapter, and a run's abort, are shown by inspect on their chains
// (route:X, adapter:A, run:R); before, they were in the audit but only SQL
// could read them ("no row with key route:X").
func TestInspectOperatorChain(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	d.enqueue("r1", "charge_card", 1)
	for _, args := range [][]string{
		{"pause", "charge_card", "--reason", "incident", "--actor", "alice"},
		{"resume", "charge_card", "--actor", "bob"},
		{"pause", "--adapter", "payments", "--actor", "alice"},
		{"abort", "r1", "--reason", "agent gave up", "--actor", "carol"},
	} {
		code, _, errb := d.run(args...)
		want(t, code, errb, 0)
	}
	for chain, events := range map[string][]string{
		"route:charge_card": {"operator:pause", "operator:resume"},
		"adapter:payments":  {"operator:pause"},
		"run:r1":            {"operator:abort"},
	} {
		code, out, errb := d.run("inspect", chain, "--output", "json")
		want(t, code, errb, 0)
		var in struct {
			Key   string `json:"key"`
			Audit []struct {
				Event string `json:"event"`
				Actor string `json:"actor"`
			} `json:"audit"`
		}
		decode(t, out, &in)
		var got []string
		for _, a := range in.Audit {
			got = append(got, a.Event)
		}
		if in.Key != chain || strings.Join(got, ",") != strings.Join(events, ",") {
			t.Errorf("inspect %s: key %q, events %v; want %v", chain, in.Key, got, events)
		}
		code, out, errb = d.run("inspect", chain)
		want(t, code, errb, 0)
		if !strings.Contains(out, "chain") || !strings.Contains(out, events[0]) {
			t.Errorf("inspect %s (table):\n%s", chain, out)
		}
	}
	code, _, errb := d.run("inspect", "route:never_paused")
	want(t, code, errb, 1, "drainer: no audit entry of route:never_paused (nothing was paused, resumed, aborted or revived there)")
}
