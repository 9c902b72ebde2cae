package main

import (
	"strings"
	"testing"
)

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
