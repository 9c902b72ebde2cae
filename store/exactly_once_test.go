package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The promises of docs/reference.md §2 under every isolation level a
// producer may use, and whatever the daemon prunes meanwhile.

var isolationLevels = []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable}

const s = storetest.Schema

// enqueueSQL calls drainer.enqueue or, with batch, enqueue_batch for one
// intent of (run, step, tool) with payload.
func enqueueIn(ctx context.Context, tx pgx.Tx, batch bool, run, step, payload string) (string, bool, error) {
	var key string
	var created bool
	var err error
	if batch {
		err = tx.QueryRow(ctx, `SELECT key, created FROM `+s+`.enqueue_batch(ARRAY[$1], ARRAY[$2], ARRAY['charge'], ARRAY[''], ARRAY[$3::jsonb])`,
			run, step, payload).Scan(&key, &created)
	} else {
		err = tx.QueryRow(ctx, `SELECT key, created FROM `+s+`.enqueue($1, $2, 'charge', '', $3::jsonb)`,
			run, step, payload).Scan(&key, &created)
	}
	return key, created, err
}

func newStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.New(s)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func sqlState(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code
	}
	return ""
}

// enqueueRetrying enqueues in a fresh transaction of level, retrying
// serialization failures as the producer libraries do.
func enqueueRetrying(t *testing.T, pool *pgxpool.Pool, level pgx.TxIsoLevel, batch bool, run, step, payload string) (string, bool) {
	t.Helper()
	ctx := context.Background()
	for range 5 {
		var key string
		var created bool
		err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: level}, func(tx pgx.Tx) error {
			var err error
			key, created, err = enqueueIn(ctx, tx, batch, run, step, payload)
			return err
		})
		if sqlState(err) == "40001" {
			continue
		}
		if err != nil {
			t.Fatalf("enqueue %s/%s at %s: %v", run, step, level, err)
		}
		return key, created
	}
	t.Fatalf("enqueue %s/%s at %s: still a serialization failure after 5 tries", run, step, level)
	return "", false
}

// settle moves the row of key to status, as a completion would.
func settle(t *testing.T, pool *pgxpool.Pool, key string, status outbox.Status) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `UPDATE `+s+`.outbox SET status = $2, attempts = 1,
	        first_attempt_at = now(), updated_at = now() - interval '1 hour' WHERE key = $1`, key, status); err != nil {
		t.Fatal(err)
	}
}

func pruneAll(t *testing.T, pool *pgxpool.Pool, status outbox.Status) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT `+s+`.prune_rows($1, now(), 1000, '{}', '{}')`, status).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A producer whose snapshot predates the prune (or the first enqueue) never
// creates a pruned key again: the key space's unique check decides, not its
// snapshot. Before migration 015 both enqueue functions answered created =
// true at REPEATABLE READ and SERIALIZABLE, and the row was sent again.
func TestOldSnapshotNeverRevivesAPrunedKey(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	ctx := context.Background()
	for _, level := range isolationLevels {
		for _, batch := range []bool{false, true} {
			for _, early := range []bool{false, true} {
				name := fmt.Sprintf("%s/batch=%v/snapshot-before-enqueue=%v", level, batch, early)
				t.Run(name, func(t *testing.T) {
					run := strings.NewReplacer(" ", "-", "/", "-", "=", "-").Replace(name)
					old, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
					if err != nil {
						t.Fatal(err)
					}
					defer old.Rollback(ctx)
					take := func() {
						if _, err := old.Exec(ctx, `SELECT count(*) FROM `+s+`.outbox`); err != nil {
							t.Fatal(err)
						}
					}
					if early {
						take()
					}
					key, created := enqueueRetrying(t, pool, pgx.ReadCommitted, batch, run, "s1", `{"amount":10}`)
					if !created {
						t.Fatal("first enqueue not created")
					}
					if !early {
						take()
					}
					settle(t, pool, key, outbox.StatusSucceeded)
					if n := pruneAll(t, pool, outbox.StatusSucceeded); n != 1 {
						t.Fatalf("pruned %d rows, want 1", n)
					}

					got, created, err := enqueueIn(ctx, old, batch, run, "s1", `{"amount":10}`)
					switch {
					case sqlState(err) == "40001" && level != pgx.ReadCommitted:
						// Retried by the caller: a fresh snapshot sees the key.
						_ = old.Rollback(ctx)
						got, created = enqueueRetrying(t, pool, level, batch, run, "s1", `{"amount":10}`)
					case err != nil:
						t.Fatalf("re-enqueue through the old snapshot: %v", err)
					default:
						if err := old.Commit(ctx); err != nil && sqlState(err) != "40001" {
							t.Fatal(err)
						}
					}
					if created || got != key {
						t.Fatalf("re-enqueue of a pruned key answered (%s, created=%v), want (%s, false)", got, created, key)
					}
					var live int
					if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.outbox WHERE key = $1`, key).Scan(&live); err != nil {
						t.Fatal(err)
					}
					if live != 0 {
						t.Fatalf("the pruned key has %d live rows again", live)
					}
				})
			}
		}
	}
}

// An enqueue into a run aborted after the producer's snapshot was taken is
// never sent: the claim sees the abort and the daemon cancels the row
// (before, the row was claimed and dispatched like any other).
func TestClaimFlagsRowsOfARunAbortedBehindTheProducersSnapshot(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := newStore(t)
	ctx := context.Background()
	for _, level := range isolationLevels {
		for _, batch := range []bool{false, true} {
			run := fmt.Sprintf("abort-%s-%v", strings.ReplaceAll(string(level), " ", "-"), batch)
			tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `SELECT count(*) FROM `+s+`.runs`); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `SELECT `+s+`.abort_run($1, 'the agent gave up')`, run); err != nil {
				t.Fatal(err)
			}
			key, created, err := enqueueIn(ctx, tx, batch, run, "late", `{}`)
			if err != nil {
				t.Fatalf("%s: %v", run, err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("%s: commit: %v", run, err)
			}
			if !created {
				t.Fatalf("%s: not created", run)
			}
			rows, err := st.Claim(ctx, pool, store.Claim{Limit: 10, Lease: time.Minute, Replica: "test"})
			if err != nil {
				t.Fatal(err)
			}
			var found bool
			for _, r := range rows {
				if r.Key == key {
					found = true
					// Under READ COMMITTED the enqueue saw the abort and
					// created the row cancelled; otherwise the claim flags it.
					if !r.RunAborted {
						t.Fatalf("%s: claimed row of an aborted run not flagged", run)
					}
				}
			}
			if !found && storetest.Get(t, pool, key).Status != outbox.StatusCancelled {
				t.Fatalf("%s: row neither cancelled at enqueue nor flagged at claim: %+v", run, storetest.Get(t, pool, key))
			}
		}
	}
}

// Payloads compare as JSON values: {"a":1.0} is {"a":1}.
func TestPayloadEqualityIsJSONValueEquality(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	for _, batch := range []bool{false, true} {
		for i, tc := range []struct {
			first, again string
			same         bool
		}{
			{`{"a":1.0}`, `{"a":1}`, true},
			{`{"a":1}`, `{"a":1.000}`, true},
			{`{"b":[1.50, {"c": 2.0}], "a":"x"}`, `{"a":"x","b":[1.5,{"c":2}]}`, true},
			{`{"a":1e2}`, `{"a":100}`, true},
			{`{"a":-0.0}`, `{"a":0}`, true},
			{`{"a":"1.0"}`, `{"a":"1"}`, false},
			{`{"a":1.01}`, `{"a":1.1}`, false},
			{`{"a":12345678901234567890}`, `{"a":12345678901234567891}`, false},
			{`[1,2]`, `[2,1]`, false},
		} {
			run := fmt.Sprintf("eq-%v-%d", batch, i)
			key, created := enqueueRetrying(t, pool, pgx.ReadCommitted, batch, run, "s", tc.first)
			if !created {
				t.Fatalf("%s: first not created", run)
			}
			err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
				got, created, err := enqueueIn(context.Background(), tx, batch, run, "s", tc.again)
				if err == nil && (created || got != key) {
					t.Errorf("%s: %s after %s answered (%s, %v)", run, tc.again, tc.first, got, created)
				}
				return err
			})
			switch {
			case tc.same && err != nil:
				t.Errorf("%s: %s after %s refused: %v", run, tc.again, tc.first, err)
			case !tc.same && sqlState(err) != "23505":
				t.Errorf("%s: %s after %s: want 23505, got %v", run, tc.again, tc.first, err)
			}
			// The same holds once the row is pruned to a tombstone.
			settle(t, pool, key, outbox.StatusSucceeded)
			pruneAll(t, pool, outbox.StatusSucceeded)
			err = pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
				_, created, err := enqueueIn(context.Background(), tx, batch, run, "s", tc.again)
				if err == nil && created {
					t.Errorf("%s: pruned key created again", run)
				}
				return err
			})
			if tc.same != (err == nil) {
				t.Errorf("%s: after pruning, %s after %s: %v", run, tc.again, tc.first, err)
			}
		}
	}
}

// A traceparent that is not a W3C trace context is refused at enqueue,
// naming it; a valid one (or none, or an empty one) is taken.
func TestEnqueueRefusesAnInvalidTraceparent(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	ctx := context.Background()
	valid := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for i, tp := range []string{"garbage", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", valid + "-extra"} {
		_, err := pool.Exec(ctx, `SELECT `+s+`.enqueue('tp', $1, 'charge', '', '{}', $2)`, fmt.Sprint("s", i), tp)
		if sqlState(err) != "22023" || !strings.Contains(err.Error(), "traceparent") {
			t.Errorf("enqueue with traceparent %q: want 22023 naming the traceparent, got %v", tp, err)
		}
		_, err = pool.Exec(ctx, `SELECT * FROM `+s+`.enqueue_batch(ARRAY['tp','tp'], ARRAY['ok', $1], ARRAY['charge','charge'], ARRAY['',''], ARRAY['{}'::jsonb,'{}'::jsonb], ARRAY[NULL, $2])`,
			fmt.Sprint("b", i), tp)
		if sqlState(err) != "22023" || !strings.Contains(err.Error(), "intent 2: traceparent") {
			t.Errorf("enqueue_batch with traceparent %q: want 22023 naming intent 2, got %v", tp, err)
		}
	}
	for i, tp := range []any{valid, nil, ""} {
		if _, err := pool.Exec(ctx, `SELECT `+s+`.enqueue('tp', $1, 'charge', '', '{}', $2)`, fmt.Sprint("ok", i), tp); err != nil {
			t.Errorf("enqueue with traceparent %v: %v", tp, err)
		}
	}
}

// Retention keeps a succeeded row of a compensable tool while its run can
// still be aborted and need it undone: until the run's saga settled or the
// route's compensation_window passed (before, it was pruned and a later
// abort compensated nothing).
func TestRetentionKeepsWhatASagaNeeds(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := newStore(t)
	ctx := context.Background()
	charge := storetest.Insert(t, pool, storetest.Row{AgentRunID: "r1", StepID: "s1", ToolName: "charge",
		Status: outbox.StatusSucceeded, Attempts: 1, UpdatedAgo: 48 * time.Hour})
	plain := storetest.Insert(t, pool, storetest.Row{AgentRunID: "r1", StepID: "s2", ToolName: "notify",
		Status: outbox.StatusSucceeded, Attempts: 1, UpdatedAgo: 48 * time.Hour})
	old := storetest.Insert(t, pool, storetest.Row{AgentRunID: "r2", StepID: "s1", ToolName: "charge",
		Status: outbox.StatusSucceeded, Attempts: 1, UpdatedAgo: 9 * 24 * time.Hour})
	r := store.Retention{
		ByStatus:    map[outbox.Status]time.Duration{outbox.StatusSucceeded: time.Hour},
		Tombstones:  30 * 24 * time.Hour,
		Audit:       30 * 24 * time.Hour,
		BatchSize:   100,
		Compensable: map[string]time.Duration{"charge": 7 * 24 * time.Hour},
	}
	if _, err := st.Prune(ctx, pool, r, time.Minute); err != nil {
		t.Fatal(err)
	}
	live := func(key string) bool {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.outbox WHERE key = $1`, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	if !live(charge) {
		t.Fatal("a compensable succeeded row inside its compensation_window was pruned")
	}
	if live(plain) || live(old) {
		t.Fatalf("rows with nothing to undo, or past the window, were kept: notify %v, old charge %v", live(plain), live(old))
	}
	// The run is aborted and its saga settles: then the row may go.
	if _, err := pool.Exec(ctx, `SELECT `+s+`.abort_run('r1', 'undo')`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Prune(ctx, pool, r, time.Minute); err != nil {
		t.Fatal(err)
	}
	if !live(charge) {
		t.Fatal("pruned while its run's saga is open")
	}
	if _, err := pool.Exec(ctx, `UPDATE `+s+`.runs SET saga_state = 'done'`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Prune(ctx, pool, r, time.Minute); err != nil {
		t.Fatal(err)
	}
	if live(charge) {
		t.Fatal("kept after its run's saga settled")
	}
}

// A run's abort outlives the tombstones of its rows: the runs row goes only
// a tombstone age after its last row was pruned (before, a tombstone age
// after the abort, while later-pruned rows' tombstones still stood).
func TestAbortOutlivesItsRunsTombstones(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := newStore(t)
	ctx := context.Background()
	key := storetest.Insert(t, pool, storetest.Row{AgentRunID: "r", StepID: "s", ToolName: "notify",
		Status: outbox.StatusCancelled, UpdatedAgo: 2 * time.Hour})
	if _, err := pool.Exec(ctx, `INSERT INTO `+s+`.runs (agent_run_id, abort_reason, aborted_by, aborted_at, saga_state)
	        VALUES ('r', 'x', 'drainer', now() - interval '10 days', 'done')`); err != nil {
		t.Fatal(err)
	}
	r := store.Retention{
		ByStatus:   map[outbox.Status]time.Duration{outbox.StatusCancelled: time.Hour},
		Tombstones: 7 * 24 * time.Hour, Audit: 30 * 24 * time.Hour, BatchSize: 100,
	}
	pruned, err := st.Prune(ctx, pool, r, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if pruned[string(outbox.StatusCancelled)] != 1 {
		t.Fatalf("pruned %v", pruned)
	}
	var runs, stones int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+s+`.runs), (SELECT count(*) FROM `+s+`.tombstones WHERE key = $1)`, key).
		Scan(&runs, &stones); err != nil {
		t.Fatal(err)
	}
	if runs != 1 || stones != 1 {
		t.Fatalf("after pruning its row: %d runs rows, %d tombstones; the abort must stay as long as the tombstone", runs, stones)
	}
	// A new step enqueued into the run is still cancelled.
	var created bool
	var newKey string
	if err := pool.QueryRow(ctx, `SELECT key, created FROM `+s+`.enqueue('r', 'new', 'notify', '', '{}')`).Scan(&newKey, &created); err != nil {
		t.Fatal(err)
	}
	if st := storetest.Get(t, pool, newKey); !created || st.Status != outbox.StatusCancelled {
		t.Fatalf("enqueue into the aborted run: created %v, status %s", created, st.Status)
	}
}

// An agent's abort of a run that a row failure aborted already is counted
// and recorded, not dropped (it used to answer 0 and leave no trace, so an
// operator's requeue could revive the run).
func TestEveryAbortIsRemembered(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `SELECT `+s+`.abort_run_internal('r', 'step s failed', 'drainer')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT `+s+`.abort_run('r', 'the agent gave up')`); err != nil {
		t.Fatal(err)
	}
	var requests int
	var by string
	if err := pool.QueryRow(ctx, `SELECT abort_requests, aborted_by FROM `+s+`.runs WHERE agent_run_id = 'r'`).Scan(&requests, &by); err != nil {
		t.Fatal(err)
	}
	if requests != 1 || by != "drainer" {
		t.Fatalf("abort_requests %d, aborted_by %s; want 1 and the first aborter kept", requests, by)
	}
	var entries int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.audit WHERE key = 'run:r' AND event = 'agent:abort'
	        AND reason = 'the agent gave up'`).Scan(&entries); err != nil {
		t.Fatal(err)
	}
	if entries != 1 {
		t.Fatalf("%d agent:abort entries on the run's chain, want 1", entries)
	}
}
