package drainer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestAuthHoldBacksOff: with the breaker disabled, a provider that keeps
// refusing the adapter's credentials is called less and less often (the
// hold doubles), instead of once a second forever. Only lower bounds on the
// gaps are checked: a slow machine makes them longer, never shorter.
func TestAuthHoldBacksOff(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var mu sync.Mutex
	var calls []time.Time
	a := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		mu.Lock()
		calls = append(calls, time.Now())
		mu.Unlock()
		return dispatch.Result{Outcome: dispatch.Auth, Status: 401, Reason: dispatch.ReasonAuth, Err: errors.New("http 401")}
	})
	keys := enqueueN(t, pool, "run", "t", 1)
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": a}, &Route{Tool: "t"}), Config{Workers: 2})
	testkit.WaitFor(t, 60*time.Second, "four refused calls", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) >= 4, ""
	})
	mu.Lock()
	seen := append([]time.Time(nil), calls...)
	mu.Unlock()
	for i := 1; i < 4; i++ {
		want := authHoldBase << (i - 1)
		if gap := seen[i].Sub(seen[i-1]); gap < want {
			t.Fatalf("call %d came %s after the previous one; the auth hold should keep it at least %s away", i+1, gap, want)
		}
	}
	testkit.WaitFor(t, 30*time.Second, "the row back to pending", func() (bool, string) { return getRow(t, pool, keys[0]).Status == outbox.StatusPending, "" })
	if r := getRow(t, pool, keys[0]); r.Attempts != 0 {
		t.Fatalf("auth refusals consumed attempts: %+v", r)
	}
}

// TestUnstorableCompletionIsIsolated: a completion the database refuses for
// its data never holds back the rows written with it. An answer jsonb cannot
// hold (a number beyond numeric's range) is stored without the answer; a
// completion refused even stripped is counted and left for its lease.
func TestUnstorableCompletionIsIsolated(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := t.Context()
	keys := enqueueN(t, pool, "run", "t", 3)
	rows, err := testStore.Claim(ctx, pool, store.Claim{Limit: 3, Lease: time.Minute, Replica: "test", Durable: false})
	if err != nil || len(rows) != 3 {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	bySeq := map[string]*claimedRow{}
	for i := range rows {
		bySeq[rows[i].Key] = &rows[i]
	}
	metrics := NewMetrics(prometheus.NewRegistry(), "test")
	e, err := New(pool, testRouting(t, map[string]dispatch.Adapter{"t": dispatch.AdapterFunc(nil)}), Config{Workers: 1, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	ok := completion{Completion: store.Completion{Seq: bySeq[keys[0]].Seq, Token: bySeq[keys[0]].LeaseToken, Status: outbox.StatusSucceeded, Response: []byte(`{"ok":1}`), KeepNext: true}}
	huge := completion{Completion: store.Completion{Seq: bySeq[keys[1]].Seq, Token: bySeq[keys[1]].LeaseToken, Status: outbox.StatusSucceeded, Response: []byte(`{"n":1e1000000}`), KeepNext: true}}
	bogus := completion{Completion: store.Completion{Seq: bySeq[keys[2]].Seq, Token: bySeq[keys[2]].LeaseToken, Status: "no_such_status", KeepNext: true}}
	e.completer.flush([]completion{ok, huge, bogus})

	if r := getRow(t, pool, keys[0]); r.Status != outbox.StatusSucceeded || string(r.Response) != `{"ok": 1}` {
		t.Fatalf("the good row was held back: %+v", r)
	}
	if r := getRow(t, pool, keys[1]); r.Status != outbox.StatusSucceeded {
		t.Fatalf("the row with an unstorable answer: %+v; want succeeded without the answer", r)
	}
	if r := getRow(t, pool, keys[2]); r.Status != outbox.StatusInFlight {
		t.Fatalf("the refused completion's row: %+v; want it left in_flight for its lease", r)
	}
	if n := testutil.ToFloat64(metrics.CompletionsRefused); n != 1 {
		t.Fatalf("drainer_completions_refused_total = %v; want 1", n)
	}
}

// closingAdapter records whether it was used after Close.
type closingAdapter struct {
	closed  atomic.Bool
	misuses atomic.Int64
	calls   atomic.Int64
}

func (a *closingAdapter) Dispatch(ctx context.Context, _ *dispatch.Message) dispatch.Result {
	a.calls.Add(1)
	if a.closed.Load() {
		a.misuses.Add(1)
	}
	select {
	case <-time.After(time.Millisecond):
	case <-ctx.Done():
	}
	if a.closed.Load() {
		a.misuses.Add(1)
	}
	return dispatch.Result{Outcome: dispatch.Success}
}

func (a *closingAdapter) Close() error {
	a.closed.Store(true)
	return nil
}

// TestReloadClosesAdaptersOnlyWhenUnused: a burst of reloads while rows
// drain closes each replaced registry exactly when no claim or attempt uses
// it any more: never during an attempt, and without waiting for the lease.
func TestReloadClosesAdaptersOnlyWhenUnused(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	enqueueN(t, pool, "run", "t", 2000)
	build := func() (*Routing, *closingAdapter) {
		a := &closingAdapter{}
		return testRouting(t, map[string]dispatch.Adapter{"t": a}, &Route{Tool: "t"}), a
	}
	rt, first := build()
	eng := startEngine(t, pool, rt, Config{Workers: 16, Lease: time.Minute})
	adapters := []*closingAdapter{first}
	for range 30 {
		next, a := build()
		adapters = append(adapters, a)
		eng.Reload(next)
		time.Sleep(20 * time.Millisecond)
	}
	testkit.WaitFor(t, 60*time.Second, "drained", func() (bool, string) { return countByStatus(t, pool)[outbox.StatusSucceeded] == 2000, "" })
	testkit.WaitFor(t, 30*time.Second, "every replaced registry closed", func() (bool, string) {
		for _, a := range adapters[:len(adapters)-1] {
			if !a.closed.Load() {
				return false, ""
			}
		}
		return true, ""
	})
	for i, a := range adapters {
		if n := a.misuses.Load(); n > 0 {
			t.Fatalf("registry %d was closed while %d attempts used it", i, n)
		}
	}
	if adapters[len(adapters)-1].closed.Load() {
		t.Fatal("the registry in force was closed")
	}
}

// TestSnapshotCountsAttemptedUnroutedRows: a row whose route disappeared
// mid-retry counts as unrouted, so the unrouted alert fires.
func TestSnapshotCountsAttemptedUnroutedRows(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := t.Context()
	enqueueN(t, pool, "run", "gone_tool", 2)
	if _, err := pool.Exec(ctx, "UPDATE drainer.outbox SET attempts = 3, first_attempt_at = now()"); err != nil {
		t.Fatal(err)
	}
	if _, err := testStore.RefreshSnapshot(ctx, pool, 0, []string{"other"}); err != nil {
		t.Fatal(err)
	}
	s, ok, err := testStore.ReadSnapshot(ctx, pool)
	if err != nil || !ok {
		t.Fatalf("snapshot: %v %v", ok, err)
	}
	if u := s.Stats.Unrouted; len(u) != 1 || u[0].Tool != "gone_tool" || u[0].Rows != 2 {
		t.Fatalf("unrouted tools %+v; want gone_tool with 2 rows", s.Stats.Unrouted)
	}
}
