package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/testkit"
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

// TestActionOnAMisspeltNameSaysSo: requeue and cancel by a --tool or --run
// that no row has at all (a typo) change nothing, exit 0 as an empty
// result does, and say on stderr which name matches no row; a name that
// has rows, none of them matching now, gets no such note.
func TestActionOnAMisspeltNameSaysSo(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	k := d.enqueue("run-1", "charge_card", 2)
	d.set(k[0], "failed", 2)

	code, out, errb := d.run("requeue", "--status", "failed", "--tool", "chrage_card", "--actor", "alice")
	if code != 0 || !strings.Contains(out, "requeued 0 row(s)") || !strings.Contains(errb, `note: no row has tool_name "chrage_card" (of any status)`) {
		t.Fatalf("requeue of a misspelt tool: exit %d\n%s\n%s", code, out, errb)
	}
	code, out, errb = d.run("cancel", "--run", "run-l", "--reason", "x", "--actor", "alice")
	if code != 0 || !strings.Contains(out, "cancelled 0 row(s)") || !strings.Contains(errb, `note: no row has agent_run_id "run-l" (of any status)`) {
		t.Fatalf("cancel of a misspelt run: exit %d\n%s\n%s", code, out, errb)
	}
	// (the failed row aborted its run: the other row is cancelled)
	code, out, errb = d.run("cancel", "--run", "run-1", "--tool", "charge_card", "--reason", "x", "--actor", "alice")
	if code != 0 || !strings.Contains(out, "cancelled 0 row(s)") || strings.Contains(errb, "note:") {
		t.Fatalf("cancel matching no row of a known tool: exit %d\n%s\n%s", code, out, errb)
	}
	if d.status(k[0]) != "failed" || d.status(k[1]) != "cancelled" {
		t.Fatal("rows changed")
	}
}

// TestBulkActionInterruptedSaysWhatItDid: an interrupt (SIGINT) in the
// middle of a bulk cancel stops it between batches: the batches written
// stand, the one under way is rolled back, and the command says how many
// rows it changed and that running it again finishes the work (before, it
// died silently, part of the rows changed).
func TestBulkActionInterruptedSaysWhatItDid(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	keys := d.enqueue("run-big", "charge_card", 30)
	ctx := context.Background()
	// The third batch (rows 21-30) waits for a lock held here.
	hold, err := d.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	if _, err := hold.Exec(ctx, `SELECT 1 FROM drainer.queue q JOIN drainer.intents i ON i.seq = q.seq WHERE i.key = $1 FOR UPDATE OF q`, keys[25]); err != nil {
		t.Fatal(err)
	}
	cmd := drainerCommand(ctx, "cancel", "--run", "run-big", "--reason", "x", "--actor", "alice", "--batch-size", "10", "--database-url", d.url)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, time.Minute, "the cancel waiting for the held row", func() (bool, string) {
		var n int
		err := d.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&n)
		return err == nil && n > 0, fmt.Sprint(n, err)
	})
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if err == nil || !strings.Contains(errb.String(), "interrupted: 20 row(s) cancelled in 2 batch(es)") ||
		!strings.Contains(errb.String(), "run the same command again to finish") || !strings.Contains(out.String(), "cancelled 20 row(s)") {
		t.Fatalf("interrupted cancel: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	n := 0
	for _, k := range keys {
		if d.status(k) == "cancelled" {
			n++
		}
	}
	if n != 20 {
		t.Fatalf("%d rows cancelled, want the 20 of the batches written", n)
	}
}
