package store_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestFirstCallsUseTheGenericPlans: on a connection's first record and
// lease (the gateway's) and its first completion, the statements that
// update the queue's generations run their generic plan, planned once for
// the connection. With the default plan cache mode each of a connection's
// first five would be planned anew for its own values, a few milliseconds
// each: the cost of every new connection (a pool growing, a database
// restart) before it settles. The plans are read from auto_explain, sent
// to the test's connection as notices: a generic plan shows the
// statement's parameters ($1), a custom one the call's values.
func TestFirstCallsUseTheGenericPlans(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := t.Context()
	cfg := pool.Config().ConnConfig.Copy()
	var mu sync.Mutex
	var plans []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		plans = append(plans, n.Message)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{`LOAD 'auto_explain'`, `SET auto_explain.log_min_duration = 0`,
		`SET auto_explain.log_nested_statements = on`, `SET auto_explain.log_level = notice`,
		`SET auto_explain.log_verbose = on`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	leased, err := st.EnqueueLeasedBatch(ctx, conn, []store.LeaseRequest{{
		In:    store.Intent{AgentRunID: "plan-run", StepID: "s", ToolName: "t", Payload: []byte(`{"a":1}`)},
		Claim: store.Claim{Limit: 1, Lease: time.Minute, Replica: "a"},
	}})
	if err != nil || len(leased) != 1 || leased[0].Row == nil {
		t.Fatalf("record and lease: %+v %v", leased, err)
	}
	r := leased[0].Row
	done, err := st.Complete(ctx, conn, []store.Completion{{Seq: r.Seq, Token: r.LeaseToken, Attempts: r.Attempts, Gen: r.Gen,
		Status: outbox.StatusSucceeded, KeepNext: true, Response: []byte(`{}`), ResponseStatus: 200}})
	if err != nil || len(done.Lost) != 0 {
		t.Fatalf("complete: lost %v, %v", done.Lost, err)
	}
	mu.Lock()
	defer mu.Unlock()
	plan := func(marker string) string {
		for _, p := range plans {
			if strings.Contains(p, marker) {
				return p
			}
		}
		t.Fatalf("no plan of the statement holding %q among %d notices", marker, len(plans))
		return ""
	}
	if p := plan("JOIN " + storetest.Schema + ".queue o ON o.seq = k.seq"); !strings.Contains(p, "k.key = $1") {
		t.Errorf("the first lease by key ran a plan made for its own key, not the generic one:\n%s", p)
	}
	if p := plan("AS u(seq, token, status, give_back"); !strings.Contains(p, "unnest($1)") {
		t.Errorf("the first completion ran a plan made for its own arrays, not the generic one:\n%s", p)
	}
}
