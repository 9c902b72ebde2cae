package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// auditBundle is a schema with a few rows and their chains: keys[0] and
// keys[1] succeeded, keys[2] retried once and pending again, keys[3]
// pending since its enqueue; route:t has an operator's note.
type auditBundle struct {
	pool *pgxpool.Pool
	st   *store.Store
	keys []string
}

func newAuditBundle(t *testing.T) *auditBundle {
	t.Helper()
	b := &auditBundle{pool: storetest.NewPool(t), st: store.MustNew(storetest.Schema)}
	ctx := context.Background()
	b.keys = storetest.Enqueue(t, b.pool, "run", "t", 4)
	rows, err := b.st.Claim(ctx, b.pool, store.Claim{Limit: 3, Lease: time.Minute, Replica: "r"})
	if err != nil || len(rows) != 3 {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	var cs []store.Completion
	for _, r := range rows {
		status := outbox.StatusSucceeded
		if r.Key == b.keys[2] {
			status = outbox.StatusPending
		}
		cs = append(cs, store.Completion{Seq: r.Seq, Token: r.LeaseToken, Attempts: r.Attempts, Status: status})
	}
	if _, err := b.st.Complete(ctx, b.pool, cs); err != nil {
		t.Fatal(err)
	}
	if err := b.st.AuditAppendEach(ctx, b.pool, []string{"route:t"}, "operator:pause", nil); err != nil {
		t.Fatal(err)
	}
	return b
}

// rotateAway turns the audit's generations, retention and span zero, until
// no entry with an id up to the largest there is now is left: every one of
// them was verified, anchored and truncated.
func (b *auditBundle) rotateAway(t *testing.T) []string {
	t.Helper()
	top := scalar[int64](t, b.pool, `SELECT coalesce(max(id), 0) FROM drainer.audit`)
	return b.rotateUntil(t, func() bool {
		return scalar[int64](t, b.pool, `SELECT count(*) FROM drainer.audit WHERE id <= $1`, top) == 0
	})
}

// rotateUntil turns the audit's generations, retention and span zero,
// one step at a time, until done says so.
func (b *auditBundle) rotateUntil(t *testing.T, done func() bool) []string {
	t.Helper()
	ctx := context.Background()
	var steps []string
	waits := 0
	for !done() {
		s, err := b.st.RotateAudit(ctx, b.pool, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if s == "waiting" || s == "busy" {
			// another backend's transaction: the other tests', autovacuum
			if waits++; waits > 30_000 {
				t.Fatalf("still not done after %v, then waiting", steps)
			}
			time.Sleep(2 * time.Millisecond)
			continue
		}
		steps = append(steps, s)
		if len(steps) > 100 {
			t.Fatalf("still not done after %v", steps)
		}
	}
	return steps
}

// prune removes every terminal row (keeping tombstones), as the
// retention pass with windows of zero does.
func (b *auditBundle) prune(t *testing.T) {
	t.Helper()
	b.pruneKeeping(t, time.Hour)
}

// pruneKeeping prunes every terminal row, and the tombstones older than
// tombstones.
func (b *auditBundle) pruneKeeping(t *testing.T, tombstones time.Duration) {
	t.Helper()
	zero := map[outbox.Status]time.Duration{}
	for _, s := range []outbox.Status{outbox.StatusSucceeded, outbox.StatusCancelled, outbox.StatusCompensated, outbox.StatusFailed} {
		zero[s] = 0
	}
	if _, err := b.st.Prune(context.Background(), b.pool, store.Retention{ByStatus: zero, Tombstones: tombstones, Audit: time.Hour, BatchSize: 100}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// forgetTombstones prunes every tombstone it may: all but those of key,
// whose tampering they are the evidence of.
func (b *auditBundle) forgetTombstones(t *testing.T, key string) {
	t.Helper()
	b.pruneKeeping(t, 0)
	if n := scalar[int64](t, b.pool, `SELECT count(*) FROM drainer.keys WHERE pruned_at IS NOT NULL AND key <> $1`, key); n != 0 {
		t.Fatalf("%d tombstones of untampered keys left", n)
	}
}

// reported fails t unless audit verify reports a problem of key (any
// key, if empty) containing want.
func (b *auditBundle) reported(t *testing.T, when, key, want string) {
	t.Helper()
	broken, err := b.st.VerifyAudit(context.Background(), b.pool, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range broken {
		if (key == "" || l.Key == key) && strings.Contains(l.Problem, want) {
			return
		}
	}
	t.Fatalf("%s: no problem of %s saying %q among %v", when, key, want, broken)
}

// TestAuditTamperingOutlivesRotation: an edited, a deleted and an
// inserted entry, and a status changed with the audit triggers off (on a
// row that stays, and on one pruned since), are reported by audit verify
// before the rotation, and still after their rows were pruned and their
// generation was verified, anchored and truncated, after one more turn of
// every generation, and once the tombstones' age has passed (a tombstone
// that is the evidence stays); so are the entries edited, deleted or
// inserted after their generation was anchored and before it was
// truncated. The rotation never stalls on them.
func TestAuditTamperingOutlivesRotation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		tamper func(t *testing.T, b *auditBundle) string // the key to blame
		want   string
	}{
		{"edited entry", func(t *testing.T, b *auditBundle) string {
			storetest.TamperEdit(t, b.pool, b.keys[0])
			return b.keys[0]
		}, "edited"},
		{"deleted entry", func(t *testing.T, b *auditBundle) string {
			storetest.TamperDelete(t, b.pool, b.keys[1])
			return b.keys[1]
		}, "removed"},
		{"inserted entry", func(t *testing.T, b *auditBundle) string {
			storetest.TamperInsert(t, b.pool, b.keys[2])
			return b.keys[2]
		}, "inserted"},
		{"status changed with the triggers off, row kept", func(t *testing.T, b *auditBundle) string {
			storetest.TamperStatus(t, b.pool, b.keys[2], outbox.StatusOutcomeUnknown)
			return b.keys[2]
		}, "not recorded"},
		{"status changed with the triggers off, row pruned", func(t *testing.T, b *auditBundle) string {
			storetest.TamperStatus(t, b.pool, b.keys[3], outbox.StatusSucceeded)
			return b.keys[3]
		}, "not recorded"},
		{"status changed with the triggers off, then a recorded change", func(t *testing.T, b *auditBundle) string {
			// The row's later, recorded change starts from the status
			// nobody recorded: its chain ends where the row stands, and
			// only the break between the two changes tells.
			storetest.TamperStatus(t, b.pool, b.keys[3], outbox.StatusCancelled)
			setStatus(t, b, b.keys[3], outbox.StatusPending)
			return b.keys[3]
		}, "not recorded"},
		{"inserted entry ending a settled chain in the row's own status", func(t *testing.T, b *auditBundle) string {
			// The forgery (a cancel) takes a new id and ends the chain of
			// a row that is cancelled anyway: once the row is pruned, its
			// tombstone agrees with the forged end.
			setStatus(t, b, b.keys[3], outbox.StatusCancelled)
			storetest.TamperInsert(t, b.pool, b.keys[3])
			return b.keys[3]
		}, "not recorded"},
		{"inserted entry ending a pruned chain in its tombstone's status", func(t *testing.T, b *auditBundle) string {
			// A row enqueued into an aborted run is cancelled by its
			// enqueue: a chain of one entry. Once it is pruned, a forged
			// cancel with a new id ends the chain, links right and agrees
			// with the tombstone's status; only the tombstone's head tells.
			if _, err := b.st.AbortRun(context.Background(), b.pool, "gone", "test", "test"); err != nil {
				t.Fatal(err)
			}
			key := storetest.Enqueue(t, b.pool, "gone", "t", 1)[0]
			if st, err := b.st.AdvanceSaga(context.Background(), b.pool, "gone", store.Compensators{}); err != nil || st != outbox.SagaDone {
				t.Fatalf("advance the aborted run's saga: %s, %v", st, err)
			}
			b.prune(t)
			if n := scalar[int64](t, b.pool, `SELECT count(*) FROM drainer.keys WHERE key = $1 AND final_status = 'cancelled'`, key); n != 1 {
				t.Fatalf("%s: %d cancelled tombstones, want 1", key, n)
			}
			storetest.TamperInsert(t, b.pool, key)
			return key
		}, "inserted or removed after it was pruned"},
	}
	// Rows deleted outside retention: no trigger records a delete, and no
	// entry is touched; the key space, or the half of the row left, tells.
	deleted := []struct {
		name   string
		tamper func(t *testing.T, b *auditBundle) string
		want   string
	}{
		{"settled row deleted through drainer.outbox", func(t *testing.T, b *auditBundle) string {
			deleteRows(t, b, `DELETE FROM drainer.outbox WHERE key = $1`, b.keys[0])
			return b.keys[0]
		}, "deleted outside retention, its intent lost"},
		{"pending row's queue row deleted, its intent kept", func(t *testing.T, b *auditBundle) string {
			deleteRows(t, b, `DELETE FROM drainer.queue q USING drainer.intents i WHERE i.seq = q.seq AND i.key = $1`, b.keys[2])
			return b.keys[2]
		}, "has no queue row"},
		{"pending row's intent deleted, its queue row kept", func(t *testing.T, b *auditBundle) string {
			deleteRows(t, b, `DELETE FROM drainer.intents WHERE key = $1`, b.keys[3])
			return b.keys[3]
		}, "deleted outside retention, its intent lost"},
	}
	// The same, done after the generation was anchored and before it is
	// truncated: the anchors were written from the entries as they were.
	for _, c := range cases[:3] {
		cases = append(cases, struct {
			name   string
			tamper func(t *testing.T, b *auditBundle) string
			want   string
		}{c.name + " after the anchoring", func(t *testing.T, b *auditBundle) string {
			b.prune(t)
			b.rotateUntil(t, func() bool {
				return scalar[int64](t, b.pool, `SELECT count(*) FROM drainer.audit_generations g
				    WHERE g.anchored_to IS NOT NULL AND EXISTS (SELECT 1 FROM drainer.audit a WHERE a.part = g.part)`) == 1
			})
			return c.tamper(t, b)
		}, c.want})
	}
	cases = append(cases, deleted...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := newAuditBundle(t)
			key := c.tamper(t, b)
			b.reported(t, "right after", key, c.want)
			b.prune(t)
			if n := scalar[int64](t, b.pool, `SELECT count(*) FROM drainer.outbox WHERE status IN ('succeeded', 'failed', 'cancelled')`); n != 0 {
				t.Fatalf("%d terminal rows left after pruning", n)
			}
			b.reported(t, "after pruning", key, c.want)
			steps := b.rotateAway(t)
			b.reported(t, "after "+strings.Join(steps, ", "), key, c.want)
			// One more turn: new entries, their generation rotated away too.
			storetest.Enqueue(t, b.pool, "run2", "t", 2)
			b.rotateAway(t)
			b.reported(t, "after another turn", key, c.want)
			if n := scalar[int64](t, b.pool, `SELECT count(*) FROM drainer.audit`); n != 0 {
				t.Fatalf("%d entries left: the rotation stalled", n)
			}
			b.forgetTombstones(t, key)
			b.reported(t, "after the tombstones' age", key, c.want)
		})
	}
}

// deleteRows runs a delete of key's row (or half of it) that must delete
// one row.
func deleteRows(t *testing.T, b *auditBundle, sql, key string) {
	t.Helper()
	tag, err := b.pool.Exec(context.Background(), sql, key)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("%s (%s): %v, %d rows", sql, key, err, tag.RowsAffected())
	}
}

// setStatus changes key's row to status as an operator's command does,
// the audit trigger recording it.
func setStatus(t *testing.T, b *auditBundle, key string, status outbox.Status) {
	t.Helper()
	tag, err := b.pool.Exec(context.Background(), `UPDATE drainer.queue q SET status = $2
	    FROM drainer.intents i WHERE i.seq = q.seq AND i.key = $1 AND q.status <> 'in_flight'`, key, status)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("set %s to %s: %v (%d rows)", key, status, err, tag.RowsAffected())
	}
}

// TestAuditAnchorsAreChained: once a chain's entries are gone, its anchor
// stands for them; deleting it, or rewriting what it recorded, is
// reported (by the ledger record that holds it, naming the chain), and
// still after another turn. An untouched schema verifies throughout.
func TestAuditAnchorsAreChained(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		tamper func(t *testing.T, b *auditBundle, key string)
		want   string
	}{
		{"deleted", func(t *testing.T, b *auditBundle, key string) { storetest.TamperAnchor(t, b.pool, key) }, "gone"},
		{"edited", func(t *testing.T, b *auditBundle, key string) {
			if _, err := b.pool.Exec(context.Background(), `UPDATE drainer.audit_anchors SET status = 'failed' WHERE key = $1`, key); err != nil {
				t.Fatal(err)
			}
		}, "edited"},
		{"rewritten, its hash recomputed", func(t *testing.T, b *auditBundle, key string) {
			if _, err := b.pool.Exec(context.Background(), `UPDATE drainer.audit_anchors
			    SET status = 'failed', row_hash = drainer.audit_anchor_hash(vid, key, hash, last_id, 'failed', attempts, problem, record)
			  WHERE key = $1`, key); err != nil {
				t.Fatal(err)
			}
		}, "no longer match"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := newAuditBundle(t)
			b.prune(t)
			b.rotateAway(t)
			if broken, err := b.st.VerifyAudit(context.Background(), b.pool, 100); err != nil || len(broken) != 0 {
				t.Fatalf("after the rotation: %v %v", broken, err)
			}
			// keys[0] was pruned: only its anchor (and its tombstone) is left.
			c.tamper(t, b, b.keys[0])
			b.reported(t, "right after", b.keys[0], c.want)
			storetest.Enqueue(t, b.pool, "run2", "t", 2)
			b.rotateAway(t)
			b.reported(t, "after another turn", b.keys[0], c.want)
			if c.name == "deleted" {
				b.forgetTombstones(t, b.keys[0])
				b.reported(t, "after the tombstones' age", b.keys[0], c.want)
			}
		})
	}
}
