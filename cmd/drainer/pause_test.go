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

// TestPauseChecksNamesAgainstConfig: with --config, a route or an adapter
// the config does not name is refused (exit 2) with the closest name, and
// nothing is paused: a typo used to print "paused" and pause nothing,
// while the provider went on being called. Without --config a note says
// the name is not checked; an empty ROUTE is a usage error.
func TestPauseChecksNamesAgainstConfig(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	cfg := writeTemp(t, t.TempDir(), "drainer.yaml", `adapters:
  payments: {type: http, url: "https://pay.example.com/v1/{tool_name}"}
routes:
  charge_card: {adapter: payments}
`)
	code, _, errb := d.run("pause", "--adapter", "paymnts", "--config", cfg, "--actor", "alice")
	want(t, code, errb, 2, `names no adapter "paymnts"`, `did you mean "payments"?`)
	code, _, errb = d.run("pause", "charge_crad", "--config", cfg, "--actor", "alice")
	want(t, code, errb, 2, `names no route "charge_crad"`, `did you mean "charge_card"?`, "its routes: charge_card")
	code, out, errb := d.run("pause", "--output", "json")
	want(t, code, errb, 0)
	if strings.TrimSpace(out) != "[]" {
		t.Fatalf("a refused name was paused: %s", out)
	}
	code, _, errb = d.run("pause", "--adapter", "payments", "--config", cfg, "--actor", "alice")
	want(t, code, errb, 0)
	if strings.Contains(errb, "not checked") {
		t.Fatalf("a checked name got the note: %q", errb)
	}
	code, _, errb = d.run("pause", "charge_card", "--actor", "alice")
	want(t, code, errb, 0, "route names are not checked without --config FILE")
	code, _, errb = d.run("pause", "", "--actor", "alice")
	want(t, code, errb, 2, "ROUTE is empty")
}
