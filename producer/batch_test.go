package producer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestEnqueueBatchMatchesSingleEnqueues: drainer.enqueue_batch answers,
// refuses, stores and counts exactly as drainer.enqueue called once per
// intent in order. Two schemas of one database receive the same random
// batches (tuples from a small pool, so intents repeat within and across
// batches; two payloads per tuple, so some repeat with another payload;
// aborted runs; keys already pruned to the tombstones), one through
// enqueue_batch, one intent by intent, and must end every batch alike.
func TestEnqueueBatchMatchesSingleEnqueues(t *testing.T) {
	url := dbtest.NewDatabase(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"batched", "single"} {
		if _, err := migrations.Migrate(ctx, conn, s, nil); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close(ctx)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	rng := rand.New(rand.NewPCG(7, 11))
	tuple := func() idemkey.Tuple {
		return idemkey.Tuple{AgentRunID: "run-" + strconv.Itoa(rng.IntN(6)), StepID: "step-" + strconv.Itoa(rng.IntN(12)),
			ToolName: "tool", BusinessScope: []string{"", "acct-1"}[rng.IntN(2)]}
	}
	// Three keys pruned, then two runs aborted, before anything else is
	// enqueued (a pruned key's run may be one of them).
	for range 3 {
		tp := tuple()
		hash := rng.IntN(2)
		for _, s := range []string{"batched", "single"} {
			// enqueued, succeeded and pruned, as retention prunes: a
			// tombstone with its chain
			if _, err := pool.Exec(ctx, fmt.Sprintf(`SELECT %[1]s.enqueue($1, $2, $3, $4, $5::jsonb)`, s),
				tp.AgentRunID, tp.StepID, tp.ToolName, tp.BusinessScope, fmt.Sprintf(`{"v":%d}`, hash)); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, fmt.Sprintf(`UPDATE %[1]s.outbox SET status = 'succeeded', updated_at = now() - interval '1 day' WHERE key = $1`, s), tp.Key()); err != nil {
				t.Fatal(err)
			}
			var pruned int
			if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT %[1]s.prune_rows('succeeded', now(), 10)`, s)).Scan(&pruned); err != nil || pruned != 1 {
				t.Fatalf("prune the row of %s in %s: %d pruned, %v", tp.Key(), s, pruned, err)
			}
		}
	}

	for _, s := range []string{"batched", "single"} {
		for _, run := range []string{"run-4", "run-5"} {
			if _, err := pool.Exec(ctx, fmt.Sprintf(`SELECT %s.abort_run($1, 'test')`, s), run); err != nil {
				t.Fatal(err)
			}
		}
	}

	refused := 0
	for b := range 80 {
		ins := make([]Intent, 1+rng.IntN(15))
		for i := range ins {
			ins[i] = Intent{Tuple: tuple(), Payload: fmt.Appendf(nil, `{"v":%d}`, rng.IntN(2))}
			if rng.IntN(4) > 0 {
				// Mostly the first payload, so most repeats are retries.
				ins[i].Payload = []byte(`{"v":0}`)
			}
		}
		batched, berr := enqueueBatched(ctx, pool, ins)
		single, serr := enqueueOneByOne(ctx, pool, ins)
		if (berr == nil) != (serr == nil) {
			t.Fatalf("batch %d: enqueue_batch error %v, single enqueues error %v", b, berr, serr)
		}
		if berr != nil {
			refused++
			if !sameRefusal(berr, serr) {
				t.Fatalf("batch %d: enqueue_batch refused with %v, single enqueues with %v", b, berr, serr)
			}
		} else if !slices.Equal(batched, single) {
			t.Fatalf("batch %d: enqueue_batch answered %v, single enqueues %v", b, batched, single)
		}
		a, s := outboxState(t, pool, "batched"), outboxState(t, pool, "single")
		if !slices.Equal(a, s) {
			t.Fatalf("batch %d: outboxes differ:\nbatched %v\nsingle  %v", b, a, s)
		}
	}
	if refused == 0 || refused == 80 {
		t.Fatalf("%d of 80 batches refused: the test must see both outcomes", refused)
	}
	for _, seq := range []string{"enqueue_duplicates", "enqueue_mismatches"} {
		var a, s int64
		q := `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM %s.%s`
		if err := pool.QueryRow(ctx, fmt.Sprintf(q, "batched", seq)).Scan(&a); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, fmt.Sprintf(q, "single", seq)).Scan(&s); err != nil {
			t.Fatal(err)
		}
		if a != s || a == 0 {
			t.Errorf("%s: batched %d, single %d (want equal, nonzero)", seq, a, s)
		}
	}
	var broken int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM batched.audit_verify(10)`).Scan(&broken); err != nil || broken != 0 {
		t.Errorf("audit of the batched schema: %d broken links (%v)", broken, err)
	}
}

func enqueueBatched(ctx context.Context, pool *pgxpool.Pool, ins []Intent) ([]Result, error) {
	var out []Result
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		out, err = Producer{Schema: "batched"}.EnqueueBatchTx(ctx, tx, ins)
		return err
	})
	return out, err
}

// enqueueOneByOne enqueues ins one by one in one transaction; an error
// names the intent as enqueue_batch does.
func enqueueOneByOne(ctx context.Context, pool *pgxpool.Pool, ins []Intent) ([]Result, error) {
	var out []Result
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i, in := range ins {
			key, created, err := Producer{Schema: "single"}.EnqueueTx(ctx, tx, in)
			if err != nil {
				return fmt.Errorf("intent %d: %w", i+1, err)
			}
			out = append(out, Result{Key: key, Created: created})
		}
		return nil
	})
	return out, err
}

var intentNumber = regexp.MustCompile(`intent (\d+)`)

// sameRefusal: the same SQLSTATE for the same intent.
func sameRefusal(a, b error) bool {
	var pa, pb *pgconn.PgError
	if !errors.As(a, &pa) || !errors.As(b, &pb) || pa.Code != pb.Code {
		return false
	}
	ma, mb := intentNumber.FindStringSubmatch(pa.Message), intentNumber.FindStringSubmatch(b.Error())
	return ma != nil && mb != nil && ma[1] == mb[1]
}

// outboxState lists the rows of schema's outbox in seq order, without seq.
func outboxState(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), fmt.Sprintf(`SELECT concat_ws('|', key, agent_run_id, step_id, business_scope, status,
	        cancel_cause, encode(payload_hash, 'hex'), payload::text) FROM %s.outbox ORDER BY seq`, schema))
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}
