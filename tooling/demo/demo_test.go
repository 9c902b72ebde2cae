package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestDemoSummary runs the demo end to end (its own throwaway Postgres) and
// checks what its summary promises: one lost answer settled by a replay the
// daemon counted, no duplicate effect, and the rows beyond the enqueued
// intents explained as the saga's compensation rows.
func TestDemoSummary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	if err := Run(ctx, Options{Out: &out, Err: &errb, Runs: 3, Workers: 4}); err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	got := out.String()
	for _, want := range []string{
		"enqueued 12 intents",
		"14 rows: the 12 enqueued intents and 2 compensation rows, added by the saga of order-42",
		"release_stock undoing 2-reserve, refund_card undoing 1-charge",
		"lost answers: 1: run-000's charge was applied",
		`drainer_dispatch_total{outcome="replay"}: 1); effects for that key: 1`,
		"duplicate effects at the provider: 0",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("demo output:\n%s", got)
	}
}

// TestDemoGateway runs the gateway demo end to end (its own throwaway
// Postgres, the mock MCP tool server, drainer run with the gateway): the
// call the harness cut and its two re-sends under new request ids have one
// effect upstream, and both re-sends are answered as replays of it.
func TestDemoGateway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	if err := RunGateway(ctx, Options{Out: &out, Err: &errb}); err != nil {
		t.Fatalf("gateway demo: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	got := out.String()
	for _, want := range []string{
		"send 1: cut by the harness while the tool was at work",
		"send 2: replay: \"charged 500 eur to card_4242 (ch_000001)\"",
		"send 3: replay: \"charged 500 eur to card_4242 (ch_000001)\"",
		"upstream requests: 1\n",
		"upstream effects: 1\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("gateway demo output lacks %q", want)
		}
	}
	if strings.Contains(got, "{\"time\"") || errb.Len() != 0 {
		t.Errorf("log lines in the demo's output; stderr %q", errb.String())
	}
	if t.Failed() {
		t.Logf("gateway demo output:\n%s", got)
	}
}
