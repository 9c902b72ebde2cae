package ops

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

var alice = Who{Actor: "alice", Reason: "provider outage INC-42"}

// env is a migrated test database and a client on it.
type env struct {
	t    testing.TB
	pool *pgxpool.Pool
	c    *Client
}

func newEnv(t testing.TB) *env {
	t.Helper()
	pool := storetest.NewPool(t)
	return &env{t: t, pool: pool, c: New(pool, store.MustNew(""))}
}

// enqueue records steps s0…s(n-1) of run for tool and returns their keys.
func (e *env) enqueue(run, tool string, n int) []string {
	e.t.Helper()
	ins := make([]store.Intent, n)
	for i := range ins {
		ins[i] = store.Intent{AgentRunID: run, StepID: "s" + strconv.Itoa(i), ToolName: tool, Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))}
	}
	return storetest.EnqueueIntents(e.t, e.pool, ins)
}

// exec runs SQL as the daemon would (no operator settings).
func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

// set moves a row to status with attempts, as the daemon's completion does.
func (e *env) set(key string, status outbox.Status, attempts int) {
	e.t.Helper()
	if status == outbox.StatusInFlight {
		e.exec(`UPDATE drainer.outbox SET status = 'in_flight', attempts = $2, lease_token = gen_random_uuid(),
		        lease_expires_at = now() + interval '30 seconds', leased_by = 'replica-1' WHERE key = $1`, key, attempts)
		return
	}
	e.exec(`UPDATE drainer.outbox SET status = $2, attempts = $3, lease_token = NULL, lease_expires_at = NULL,
	        first_attempt_at = CASE WHEN $3 > 0 THEN coalesce(first_attempt_at, now()) END,
	        updated_at = now() WHERE key = $1`, key, status, attempts)
}

type rowInfo struct {
	Status    string
	Attempts  int
	LastError *string
	Note      *string
	DueNow    bool
}

func (e *env) row(key string) rowInfo {
	e.t.Helper()
	var r rowInfo
	err := e.pool.QueryRow(context.Background(), `SELECT status, attempts, last_error, note, next_attempt_at <= now()
	    FROM drainer.outbox WHERE key = $1`, key).Scan(&r.Status, &r.Attempts, &r.LastError, &r.Note, &r.DueNow)
	if err != nil {
		e.t.Fatalf("row %s: %v", key, err)
	}
	return r
}

func (e *env) status(key string) string { e.t.Helper(); return e.row(key).Status }

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

type auditRow struct {
	Event, Actor string
	From, To     *string
	Reason       *string
}

// lastAudit returns the newest audit entry of key.
func (e *env) lastAudit(key string) auditRow {
	e.t.Helper()
	var a auditRow
	err := e.pool.QueryRow(context.Background(), `SELECT event, actor, from_status, to_status, reason
	    FROM drainer.audit WHERE key = $1 ORDER BY id DESC LIMIT 1`, key).Scan(&a.Event, &a.Actor, &a.From, &a.To, &a.Reason)
	if err != nil {
		e.t.Fatalf("audit of %s: %v", key, err)
	}
	return a
}

func (e *env) aborted(run string) bool {
	e.t.Helper()
	return e.count(`SELECT count(*) FROM drainer.runs WHERE agent_run_id = $1`, run) == 1
}

// wantRefused checks that err is a *TransitionError for key in status.
func wantRefused(t testing.TB, err error, key string, status outbox.Status) *TransitionError {
	t.Helper()
	var te *TransitionError
	if !errors.As(err, &te) {
		t.Fatalf("err = %v (%T), want a *TransitionError", err, err)
	}
	if te.Key != key || te.Status != status {
		t.Fatalf("refusal = %+v, want key %s status %s", te, key, status)
	}
	return te
}
