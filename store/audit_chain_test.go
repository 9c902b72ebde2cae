package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestAuditHeadCatchesTheLastEntryAndABypass: the completion writes its
// entries itself and moves the row's head; a change by another role is
// still recorded (by the trigger, as that role); audit verify then catches
// the deletion of a chain's last entry (which leaves the chain itself
// intact) and a change of status made with the audit switched off.
func TestAuditHeadCatchesTheLastEntryAndABypass(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := context.Background()
	keys := storetest.Enqueue(t, pool, "run", "t", 3)
	storetest.Insert(t, pool, storetest.Row{AgentRunID: "other", ToolName: "x"}) // another writer's insert
	if _, err := pool.Exec(ctx, `SELECT drainer.enqueue('run2', 's', 'x', '', '{}')`); err != nil {
		t.Fatal(err)
	}
	headsAtEnd := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM drainer.queue q JOIN drainer.intents i USING (seq)
		    WHERE q.audit_head = (SELECT a.hash FROM drainer.audit a WHERE a.key = i.key ORDER BY a.id DESC LIMIT 1)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Enqueued (batch, single) or inserted by another writer: each row
	// carries its first entry's hash.
	if n := headsAtEnd(); n != 5 {
		t.Fatalf("after the enqueues: %d rows carry their chain's last hash, want 5", n)
	}
	// The other two rows out of the claim's way (a change audit does not record).
	if _, err := pool.Exec(ctx, `UPDATE drainer.queue q SET next_attempt_at = now() + interval '1 day'
	    FROM drainer.intents i WHERE i.seq = q.seq AND i.key <> ALL($1)`, keys); err != nil {
		t.Fatal(err)
	}
	rows, err := st.Claim(ctx, pool, store.Claim{Limit: 3, Lease: time.Minute, Replica: "r"})
	if err != nil || len(rows) != 3 {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	var cs []store.Completion
	for _, r := range rows {
		cs = append(cs, store.Completion{Seq: r.Seq, Token: r.LeaseToken, Attempts: r.Attempts, Status: outbox.StatusSucceeded, ResponseStatus: 200})
	}
	if _, err := st.Complete(ctx, pool, cs); err != nil {
		t.Fatal(err)
	}
	verify := func() []store.BrokenLink {
		t.Helper()
		broken, err := st.VerifyAudit(ctx, pool, 10)
		if err != nil {
			t.Fatal(err)
		}
		return broken
	}
	if b := verify(); len(b) != 0 {
		t.Fatalf("after the completion: %v", b)
	}
	if n := headsAtEnd(); n != 5 {
		t.Fatalf("after the completion: %d rows carry their chain's last hash, want 5 (3 completed, 2 untouched)", n)
	}

	// Another role's edit is recorded, as that role.
	if _, err := pool.Exec(ctx, `UPDATE drainer.queue q SET status = 'compensated' FROM drainer.intents i
	    WHERE i.seq = q.seq AND i.key = $1`, keys[0]); err != nil {
		t.Fatal(err)
	}
	trail, err := st.AuditTrail(ctx, pool, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	last := trail[len(trail)-1]
	if outbox.Status(deref(last.ToStatus)) != outbox.StatusCompensated || !strings.HasPrefix(last.Actor, "db:") {
		t.Fatalf("another role's edit recorded as %s by %s", deref(last.ToStatus), last.Actor)
	}
	if b := verify(); len(b) != 0 {
		t.Fatalf("after another role's recorded edit: %v", b)
	}

	// The last entry of a chain deleted: the chain still links, the head does not.
	if _, err := pool.Exec(ctx, `DELETE FROM drainer.audit WHERE id = (SELECT max(id) FROM drainer.audit WHERE key = $1)`, keys[1]); err != nil {
		t.Fatal(err)
	}
	b := verify()
	if len(b) != 1 || b[0].Key != keys[1] || !strings.Contains(b[0].Problem, "removed") {
		t.Fatalf("after deleting a chain's last entry: %v", b)
	}

	// A change made with the audit switched off.
	if _, err := pool.Exec(ctx, `ALTER TABLE drainer.queue DISABLE TRIGGER queue_audit_update`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE drainer.queue q SET status = 'failed' FROM drainer.intents i
	    WHERE i.seq = q.seq AND i.key = $1`, keys[2]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE drainer.queue ENABLE TRIGGER queue_audit_update`); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, l := range verify() {
		found = found || (l.Key == keys[2] && strings.Contains(l.Problem, "not recorded"))
	}
	if !found {
		t.Fatalf("a change with the audit off was not reported: %v", verify())
	}
}

// TestAuditChainsHoldUnderRandomInterleavings: replicas claiming and
// completing, a reclaimer, operators requeueing, cancelling and noting on
// rows, and another role editing rows, all at once on the same few rows in random order.
// Whatever the interleaving, every chain verifies and every row stands
// where its chain ends.
func TestAuditChainsHoldUnderRandomInterleavings(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := context.Background()
	keys := storetest.Enqueue(t, pool, "run", "t", 24)
	statuses := []outbox.Status{outbox.StatusPending, outbox.StatusSucceeded, outbox.StatusFailed, outbox.StatusOutcomeUnknown, outbox.StatusCancelled}
	// Conflicts between concurrent statements are the database's to
	// refuse; anything else fails the test.
	benign := func(err error) bool {
		var pe *pgconn.PgError
		return err == nil || (errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001"))
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var wg sync.WaitGroup
	var truncations atomic.Int64
	errs := make(chan error, 64)
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for range 120 {
				var err error
				switch rng.IntN(9) {
				case 0, 1:
					lease := time.Minute
					if rng.IntN(3) == 0 {
						lease = time.Millisecond
					}
					var rows []store.ClaimedRow
					rows, err = st.Claim(ctx, pool, store.Claim{Limit: 1 + rng.IntN(4), Lease: lease, Replica: "r"})
					if err == nil && len(rows) > 0 {
						if lease == time.Millisecond {
							time.Sleep(2 * time.Millisecond)
						}
						var cs []store.Completion
						for _, r := range rows {
							c := store.Completion{Seq: r.Seq, Token: r.LeaseToken, Attempts: r.Attempts,
								Status: statuses[rng.IntN(len(statuses))], GiveBack: rng.IntN(4) == 0,
								NoRequest: rng.IntN(3) == 0, Note: "note"}
							msg := "boom"
							if rng.IntN(2) == 0 {
								c.LastError = &msg
							}
							cs = append(cs, c)
						}
						_, err = st.Complete(ctx, pool, cs)
					}
				case 2:
					_, err = st.Reclaim(ctx, pool, store.ReclaimPolicy{})
				case 3:
					k := keys[rng.IntN(len(keys))]
					_, err = st.Requeue(ctx, pool, []string{k}, []outbox.Status{statuses[rng.IntN(len(statuses))]}, true)
				case 4:
					_, err = st.Cancel(ctx, pool, []string{keys[rng.IntN(len(keys))]}, "operator")
				case 6:
					// an operator's note on a row that changes nothing else
					err = st.AuditAppendEach(ctx, pool, []string{keys[rng.IntN(len(keys))]}, "operator:requeue", nil)
				case 7:
					// the audit's generations turned with a retention of a
					// few milliseconds: chains lose their beginnings
					var step string
					step, err = st.RotateAudit(ctx, pool, 3*time.Millisecond, time.Millisecond)
					if strings.HasPrefix(step, "truncated") && step != "truncated 0" {
						truncations.Add(1)
					}
				case 8:
					// a reader whose snapshot outlives rotation steps sees
					// every chain whole, at its start and at its end
					err = verifyInOneSnapshot(ctx, pool, func() { time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond) })
				case 5:
					_, err = pool.Exec(ctx, `UPDATE drainer.queue q SET attempts = q.attempts + 1
					    FROM drainer.intents i WHERE i.seq = q.seq AND i.key = $1 AND q.status <> 'in_flight'`, keys[rng.IntN(len(keys))])
				}
				if !benign(err) {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	broken, err := st.VerifyAudit(ctx, pool, 20)
	if err != nil || len(broken) != 0 {
		t.Fatalf("audit verify after the interleaving: %v %v", broken, err)
	}
	var entries int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM drainer.audit`).Scan(&entries); err != nil || entries == 0 {
		t.Fatalf("%d audit entries (%v): the interleaving changed nothing", entries, err)
	}
	// Now alone: the rotation goes on until a generation with entries was
	// truncated (if the interleaving truncated none), and every chain
	// still verifies.
	// (A truncation waits for the transactions running when its
	// generation was closed, other tests' in this cluster too: two minutes.)
	for i, deadline := 0, time.Now().Add(2*time.Minute); truncations.Load() == 0; i++ {
		step, err := st.RotateAudit(ctx, pool, 3*time.Millisecond, time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(step, "truncated") && step != "truncated 0" {
			truncations.Add(1)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no generation truncated after %d rotation steps in two minutes (last %q)", i, step)
		}
		time.Sleep(time.Millisecond)
	}
	if broken, err := st.VerifyAudit(ctx, pool, 20); err != nil || len(broken) != 0 {
		t.Fatalf("audit verify after the rotation: %v %v", broken, err)
	}
}

// verifyInOneSnapshot runs audit_verify twice in one REPEATABLE READ
// transaction, with between in the middle, and fails on any problem.
func verifyInOneSnapshot(ctx context.Context, pool *pgxpool.Pool, between func()) error {
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		for i := range 2 {
			var problems []string
			rows, err := tx.Query(ctx, `SELECT key || ': ' || problem FROM drainer.audit_verify(100)`)
			if err != nil {
				return err
			}
			if problems, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				return err
			}
			if len(problems) > 0 {
				return fmt.Errorf("audit verify in one snapshot (read %d): %v", i+1, problems)
			}
			if i == 0 {
				between()
			}
		}
		return nil
	})
}
