package producer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// batchIntents returns n intents of run, and the same in reverse order.
func batchIntents(run string, n int) (fwd, rev []Intent) {
	fwd = make([]Intent, n)
	for i := range fwd {
		fwd[i] = Intent{Tuple: idemkey.Tuple{AgentRunID: run, StepID: fmt.Sprintf("step-%02d", i),
			ToolName: "charge", BusinessScope: "acct"}, Payload: fmt.Appendf(nil, `{"n":%d}`, i)}
	}
	rev = slices.Clone(fwd)
	slices.Reverse(rev)
	return fwd, rev
}

// enqueueBatchRC enqueues ins in a READ COMMITTED transaction of its own.
func enqueueBatchRC(ctx context.Context, pool *pgxpool.Pool, ins []Intent) ([]Result, error) {
	var out []Result
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		var err error
		out, err = EnqueueBatchTx(ctx, tx, ins)
		return err
	})
	return out, err
}

// TestEnqueueBatchOppositeOrdersNeverDeadlock: transactions that enqueue
// the same intents in opposite orders under READ COMMITTED wait for one
// another but never deadlock (40P01): enqueue_batch takes the key space's
// locks in key order, whatever the intents' order. Exactly one of them
// creates the rows, in its own order (seq follows it); the others answer
// created = false.
//
// Each forced round first holds the key of the middle intent in a third
// transaction until both batches wait on it, then rolls it back: both
// batches hold the keys of their own first half by then, so locks taken in
// the intents' order deadlock every round (the code before this test's
// revision did). The free rounds are the probe that found it: four batches
// at once, half of them reversed.
func TestEnqueueBatchOppositeOrdersNeverDeadlock(t *testing.T) {
	ctx := t.Context()
	pool := newPool(t)

	var deadlocks []string
	check := func(round string, fwd []Intent, got [][]Result, errs []error) {
		t.Helper()
		winners := 0
		for i, err := range errs {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "40P01" {
				deadlocks = append(deadlocks, fmt.Sprintf("%s batch %d: %s", round, i, pe.Message))
				continue
			}
			if err != nil {
				t.Fatalf("%s batch %d: %v", round, i, err)
			}
			created := 0
			for _, r := range got[i] {
				if r.Created {
					created++
				}
			}
			switch created {
			case len(fwd):
				winners++
			case 0:
			default:
				t.Errorf("%s batch %d created %d of %d intents: all or none", round, i, created, len(fwd))
			}
		}
		if winners > 1 {
			t.Errorf("%s: %d batches created the rows", round, winners)
		}
	}

	const forced = 4
	for r := range forced {
		run := fmt.Sprintf("forced-%d", r)
		fwd, rev := batchIntents(run, 50)
		// The blocker holds the key of the middle intent.
		blocker, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := EnqueueTx(ctx, blocker, fwd[25]); err != nil {
			t.Fatal(err)
		}
		var blockerPID int
		if err := blocker.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&blockerPID); err != nil {
			t.Fatal(err)
		}
		batches := [][]Intent{fwd, rev}
		got, errs := make([][]Result, 2), make([]error, 2)
		var wg sync.WaitGroup
		for i, ins := range batches {
			wg.Go(func() { got[i], errs[i] = enqueueBatchRC(ctx, pool, ins) })
		}
		// Both batches wait on the blocker (directly, or one on the other).
		deadline := time.Now().Add(30 * time.Second)
		for {
			var waiting int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			    WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> $1`, blockerPID).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			if waiting >= 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d of 2 batches wait on the blocker after 30 s", r, waiting)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := blocker.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		check(fmt.Sprintf("forced round %d", r), fwd, got, errs)
		// The winner's rows follow its own order.
		var keys []string
		rows, err := pool.Query(ctx, `SELECT key FROM drainer.outbox WHERE agent_run_id = $1 ORDER BY seq`, run)
		if err != nil {
			t.Fatal(err)
		}
		if keys, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		if len(errs) == 2 && errs[0] == nil && errs[1] == nil {
			var want []Intent
			for i, res := range got {
				if len(res) > 0 && res[0].Created {
					want = batches[i]
				}
			}
			wantKeys := make([]string, len(want))
			for i, in := range want {
				wantKeys[i] = in.Key()
			}
			if !slices.Equal(keys, wantKeys) {
				t.Errorf("forced round %d: rows in seq order %v, want the creating batch's order %v", r, keys, wantKeys)
			}
		}
	}

	const free = 30
	for r := range free {
		fwd, rev := batchIntents(fmt.Sprintf("free-%d", r), 50)
		got, errs := make([][]Result, 4), make([]error, 4)
		var wg sync.WaitGroup
		for i := range 4 {
			ins := fwd
			if i%2 == 1 {
				ins = rev
			}
			wg.Go(func() { got[i], errs[i] = enqueueBatchRC(ctx, pool, ins) })
		}
		wg.Wait()
		check(fmt.Sprintf("free round %d", r), fwd, got, errs)
	}
	if len(deadlocks) > 0 {
		t.Errorf("%d deadlocks (40P01) in %d forced rounds of 2 batches and %d free rounds of 4:\n%s",
			len(deadlocks), forced, free, strings.Join(deadlocks, "\n"))
	}
}
