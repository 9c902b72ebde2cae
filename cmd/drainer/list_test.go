package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/ops"
	"github.com/drainer-io/drainer/producer"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
)

func TestListCommand(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	k := d.enqueue("run-1", "charge_card", 3)
	d.set(k[2], "failed", 12) // aborts run-1: k[0] and k[1] are cancelled
	d.exec(`UPDATE drainer.outbox SET last_error = repeat('x', 100) || E'\nsecond line' WHERE key = $1`, k[1])

	code, out, errb := d.run("list")
	want(t, code, errb, 0)
	checkAligned(t, out)
	if !strings.Contains(out, k[0]) || !strings.Contains(out, "xxx…") || strings.Contains(out, "second line") {
		t.Errorf("table:\n%s", out)
	}

	code, out, errb = d.run("list", "--limit", "2")
	want(t, code, errb, 0)
	if !strings.Contains(out, "more rows: add --after-seq 2") {
		t.Errorf("no next-page hint:\n%s", out)
	}
	code, out, errb = d.run("list", "--after-seq", "2", "--output", "json")
	want(t, code, errb, 0)
	var rows []map[string]any
	decode(t, out, &rows)
	if len(rows) != 1 || rows[0]["key"] != k[2] || rows[0]["status"] != "failed" || rows[0]["attempts"] != 12.0 {
		t.Fatalf("json rows = %v", rows)
	}
	for _, f := range []string{"key", "seq", "agent_run_id", "step_id", "tool_name", "business_scope", "kind", "payload",
		"status", "attempts", "next_attempt_at", "last_error", "response", "response_status", "created_at", "updated_at"} {
		if _, ok := rows[0][f]; !ok {
			t.Errorf("json lacks %q", f)
		}
	}

	code, out, errb = d.run("list", "--status", "failed", "--run", "run-1", "--tool", "charge_card", "--output", "json", "--limit", "1")
	want(t, code, errb, 0)
	decode(t, out, &rows)
	if len(rows) != 1 || errb != "" {
		t.Fatalf("filtered: %v; stderr %q", rows, errb)
	}
	code, out, _ = d.run("list", "--status", "compensated")
	if code != 0 || strings.TrimSpace(out) != "no rows match" {
		t.Fatalf("empty list: %d %q", code, out)
	}
	code, out, _ = d.run("list", "--older-than", "1d", "--output", "json")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("older-than: %d %q", code, out)
	}
}

// writeSizes records the largest single write and the bytes written.
type writeSizes struct {
	bytes.Buffer
	largest int
}

func (w *writeSizes) Write(p []byte) (int, error) {
	w.largest = max(w.largest, len(p))
	return w.Buffer.Write(p)
}

// TestListJSONHoldsOneRow: `list --output json` writes its page a row at a
// time, so it holds one row's encoding, not the page's: with ten rows of
// 256 KiB no write is larger than one row (writeJSON of the page wrote
// all 2.5 MiB at once), and the output is byte for byte what writeJSON of
// the same page writes.
func TestListJSONHoldsOneRow(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	const pad = 256 << 10
	err := pgx.BeginFunc(t.Context(), d.pool, func(tx pgx.Tx) error {
		for i := range 12 {
			in := producer.Intent{Payload: []byte(fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, strings.Repeat("x", pad)))}
			in.AgentRunID, in.StepID, in.ToolName = "run-big", fmt.Sprintf("s%d", i), "store_blob"
			if _, _, err := producer.EnqueueTx(t.Context(), tx, in); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out writeSizes
	var errb bytes.Buffer
	code := execute([]string{"list", "--output", "json", "--limit", "10", "--database-url", d.url}, &out, &errb)
	want(t, code, errb.String(), 0)
	if out.Len() < 10*pad || out.largest > pad+4096 {
		t.Errorf("wrote %d bytes, the largest write %d: want ten rows of %d, none written with another", out.Len(), out.largest, pad)
	}
	if !strings.Contains(errb.String(), "more rows: add --after-seq") {
		t.Errorf("no next-page hint on stderr: %q", errb.String())
	}
	st, err := store.New(migrations.DefaultSchema)
	if err != nil {
		t.Fatal(err)
	}
	c := ops.New(d.pool, st)
	page, err := c.List(t.Context(), ops.Filter{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	var whole bytes.Buffer
	if err := writeJSON(&whole, page.Rows); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), whole.Bytes()) {
		t.Errorf("streamed output differs from the page's encoding (%d and %d bytes)", out.Len(), whole.Len())
	}
}
