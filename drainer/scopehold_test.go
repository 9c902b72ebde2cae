package drainer

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5/pgxpool"
)

// scopeRows enqueues n rows of tool in one business_scope, in one
// transaction, and returns their keys in order.
func scopeRows(t *testing.T, pool *pgxpool.Pool, tool, scope string, n int) []string {
	t.Helper()
	ins := make([]store.Intent, n)
	for i := range ins {
		ins[i] = store.Intent{AgentRunID: "run-" + scope, StepID: "s" + strconv.Itoa(i), ToolName: tool, BusinessScope: scope, Payload: []byte(`{}`)}
	}
	return storetest.EnqueueIntents(t, pool, ins)
}

// scopeDue counts a scope's pending rows, and those of them due now.
func scopeDue(t *testing.T, pool *pgxpool.Pool, scope string) (pending, due int) {
	t.Helper()
	err := pool.QueryRow(t.Context(), `SELECT count(*), count(*) FILTER (WHERE next_attempt_at <= now())
	      FROM drainer.queue WHERE business_scope = $1 AND status = $2`, scope, outbox.StatusPending).Scan(&pending, &due)
	if err != nil {
		t.Fatal(err)
	}
	return pending, due
}

// TestScopeBacklogIsHeld: the rows queued behind the first row of a scope
// of an ordered tool are held out of the claims' way, and each is made due
// when the one before it settles: with 400 rows in one scope, no more than
// the scope's first row is due while hundreds wait, and the scope still
// goes out one row at a time in enqueue order. Before, every row stayed
// due, and every claim of the replica walked past all of them (a scope of
// 20,000 rows: a second per claim, for every tool).
func TestScopeBacklogIsHeld(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var mu sync.Mutex
	var sent []int64
	inFlight := 0
	overlap := false
	a := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		mu.Lock()
		if m.Tuple.BusinessScope == "acct" {
			sent = append(sent, m.Seq)
			inFlight++
			overlap = overlap || inFlight > 1
		}
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		if m.Tuple.BusinessScope == "acct" {
			inFlight--
		}
		mu.Unlock()
		return dispatch.Result{Outcome: dispatch.Success}
	})
	const n = 400
	keys := scopeRows(t, pool, "ledger", "acct", n)
	scopeRows(t, pool, "ledger", "other", 3)
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"ledger": a},
		&Route{Tool: "ledger", Ordering: outbox.OrderingBusinessScope}), Config{Workers: 8})
	testkit.WaitFor(t, time.Minute, "the scope's waiting rows held", func() (bool, string) {
		pending, due := scopeDue(t, pool, "acct")
		if pending < n/2 {
			t.Fatalf("the scope drained to %d rows before its waiting rows were ever held", pending)
		}
		return due <= 1, strconv.Itoa(due) + " of " + strconv.Itoa(pending) + " pending rows due"
	})
	testkit.WaitFor(t, 10*time.Minute, "the scopes drained", func() (bool, string) {
		got := countByStatus(t, pool)[outbox.StatusSucceeded]
		return got == n+3, strconv.Itoa(got) + " succeeded"
	})
	mu.Lock()
	defer mu.Unlock()
	if overlap {
		t.Fatal("two rows of the scope were sent at once")
	}
	if len(sent) != n || !slices.IsSorted(sent) {
		t.Fatalf("the scope's %d rows were sent %d times, in this order: %v", n, len(sent), sent)
	}
	if s := getRow(t, pool, keys[n-1]); s.Attempts != 1 {
		t.Fatalf("the scope's last row took %d attempts", s.Attempts)
	}
}

// TestScopeHoldEndsWithoutItsRelease: when a scope's first row is settled
// by something other than its completion (here an operator's cancel of a
// row waiting for its retry), no release follows, and the rows held
// behind it go out when their hold ends (Config.ScopeHold): a hold never
// strands a row.
func TestScopeHoldEndsWithoutItsRelease(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	a := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		if m.Tuple.StepID == "s0" {
			return dispatch.Result{Outcome: dispatch.Retry, Status: 503, RetryAfter: time.Hour}
		}
		return dispatch.Result{Outcome: dispatch.Success}
	})
	keys := scopeRows(t, pool, "ledger", "acct", 4)
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"ledger": a},
		&Route{Tool: "ledger", Ordering: outbox.OrderingBusinessScope, MaxAttempts: 5, Backoff: Backoff{Base: time.Second, Cap: time.Second, MaxRetryAfter: 2 * time.Hour}}),
		Config{Workers: 4, ScopeHold: 3 * time.Second})
	testkit.WaitFor(t, time.Minute, "the first row waiting for its retry, the others held", func() (bool, string) {
		s := getRow(t, pool, keys[0])
		pending, due := scopeDue(t, pool, "acct")
		return s.Attempts == 1 && pending == 4 && due == 0, strconv.Itoa(due) + " of " + strconv.Itoa(pending) + " pending rows due"
	})
	// The row may be in a claim's hands for a moment (a loaded machine):
	// cancel it once it is back.
	testkit.WaitFor(t, time.Minute, "the first row cancelled", func() (bool, string) {
		got, err := testStore.Cancel(t.Context(), pool, keys[:1], "cancelled by the test")
		if err != nil {
			t.Fatalf("cancel the first row: %v", err)
		}
		return len(got) == 1, string(getRow(t, pool, keys[0]).Status)
	})
	testkit.WaitFor(t, time.Minute, "the held rows sent once their hold ended", func() (bool, string) {
		got := countByStatus(t, pool)[outbox.StatusSucceeded]
		return got == 3, strconv.Itoa(got) + " succeeded"
	})
}

// BenchmarkScopeBacklog: the cost of one large ordered scope to the rest
// of the drain. 20,000 rows wait in one business_scope of an ordered
// tool; then b.N rows of another tool are enqueued and drained. It reports
// how long those took (other_ms) and how many of the scope's rows went out
// meanwhile and in the next two seconds (scope_rows_per_s). Without the
// scope holds: other_ms about 15,000 and scope_rows_per_s about 1.
func BenchmarkScopeBacklog(b *testing.B) {
	pool := newPool(b)
	var scope, other atomic.Int64
	a := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		if m.Tuple.ToolName == "ledger" {
			scope.Add(1)
		} else {
			other.Add(1)
		}
		return dispatch.Result{Outcome: dispatch.Success}
	})
	const n = 20000
	ins := make([]store.Intent, n)
	for i := range ins {
		ins[i] = store.Intent{AgentRunID: "run", StepID: "s" + strconv.Itoa(i), ToolName: "ledger", BusinessScope: "acct", Payload: []byte(`{}`)}
	}
	for i := 0; i < n; i += 5000 {
		storetest.EnqueueIntents(b, pool, ins[i:i+5000])
	}
	startEngine(b, pool, testRouting(b, map[string]dispatch.Adapter{"ledger": a, "other": a},
		&Route{Tool: "ledger", Ordering: outbox.OrderingBusinessScope}, &Route{Tool: "other"}), Config{Workers: 8})
	time.Sleep(3 * time.Second) // the scope's first claims and holds
	rows := max(b.N, 200)
	b.ResetTimer()
	start, scopeBefore := time.Now(), scope.Load()
	enqueueN(b, pool, "other", "other", rows)
	for other.Load() < int64(rows) {
		time.Sleep(time.Millisecond)
	}
	otherTook := time.Since(start)
	b.StopTimer()
	time.Sleep(2 * time.Second)
	b.ReportMetric(float64(otherTook.Milliseconds()), "other_ms")
	b.ReportMetric(float64(scope.Load()-scopeBefore)/time.Since(start).Seconds(), "scope_rows_per_s")
}
