package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/compensations"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/drainer-io/drainer/tooling/pgtemp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// cluster is a throwaway Postgres holding a migrated template database, so
// that each test database is a fast CREATE DATABASE … TEMPLATE.
type cluster struct {
	c *pgtemp.Cluster
}

func newCluster(t testing.TB, maxConnections int) *cluster {
	t.Helper()
	c, err := pgtemp.Start(t.Context(), pgtemp.Options{Settings: map[string]string{
		"max_connections": fmt.Sprint(maxConnections),
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	cl := &cluster{c: c}
	cl.exec(t, "postgres", "CREATE DATABASE tmpl")
	conn, err := pgx.Connect(t.Context(), c.URL("tmpl"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Migrate(t.Context(), conn, storetest.Schema, nil); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(context.Background())
	return cl
}

func (cl *cluster) url(db string) string { return cl.c.URL(db) }

func (cl *cluster) exec(t testing.TB, db, sql string, args ...any) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), cl.url(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// createDBs creates migrated databases named names, four at a time.
func (cl *cluster) createDBs(t testing.TB, names []string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	sem := make(chan struct{}, 8)
	for _, n := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			conn, err := pgx.Connect(t.Context(), cl.url("postgres"))
			if err == nil {
				_, err = conn.Exec(t.Context(), "CREATE DATABASE "+pgx.Identifier{n}.Sanitize()+" TEMPLATE tmpl STRATEGY file_copy")
				_ = conn.Close(context.Background())
			}
			if err != nil {
				errs <- fmt.Errorf("create %s: %w", n, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// enqueue adds n rows of tool "t" in run "run-<db>-<batch>" to db.
func (cl *cluster) enqueue(t testing.TB, db, batch string, n int) []string {
	t.Helper()
	pc, err := pgxpool.ParseConfig(cl.url(db))
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(t.Context(), pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	return storetest.Enqueue(t, pool, "run-"+db+"-"+batch, "t", n)
}

// statuses counts db's rows by status.
func (cl *cluster) statuses(t testing.TB, db string) map[string]int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), cl.url(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, _ := conn.Query(t.Context(), "SELECT status, count(*) FROM drainer.outbox GROUP BY status")
	out := map[string]int{}
	var s string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&s, &n}, func() error { out[s] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// connections returns a function counting server connections to the given
// databases, on a connection of its own opened now (so that it is not
// refused while the server is full).
func (cl *cluster) connections(t testing.TB, dbs []string) func() int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), cl.url("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return func() int {
		var n int
		if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE datname = ANY($1)", dbs).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// counter is the provider: it counts attempts per key and records when
// each run saw its first and last one.
type counter struct {
	mu          sync.Mutex
	start       time.Time
	n           map[string]int
	run         map[string]string // key → agent run, to say where duplicates were
	sameAttempt int               // dispatches repeating a key's attempt number (a broken claim or fence)
	attempts    map[string]map[int]bool
	dups        int
	retries     int // dispatches of an attempt after the first (a lease expired)
	total       int
	first, last map[string]time.Duration // by agent run
	delay       time.Duration
	jitter      time.Duration // when set, each dispatch also waits a random time up to it
	// hold, when set, is how long the provider takes to answer m, once
	// the call is counted (an answer cut off by the call's deadline is
	// ambiguous).
	hold   func(m *dispatch.Message) time.Duration
	active int                     // calls under way
	before func(*dispatch.Message) // when set, runs first on each dispatch
	// failOnce holds keys whose first attempt fails (a retryable answer):
	// an injected failure, after which the key is sent again. failRuns
	// names runs whose first row (step-0) is added to it when first sent,
	// so that the failure is decided before the row can be sent.
	failOnce map[string]bool
	failRuns map[string]bool
}

func newCounter() *counter {
	return &counter{start: time.Now(), n: map[string]int{}, run: map[string]string{}, attempts: map[string]map[int]bool{}, first: map[string]time.Duration{}, last: map[string]time.Duration{}}
}

func (c *counter) Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result {
	if c.before != nil {
		c.before(m)
	}
	if c.delay > 0 {
		time.Sleep(c.delay)
	}
	if c.jitter > 0 {
		time.Sleep(rand.N(c.jitter))
	}
	c.mu.Lock()
	c.n[m.Key]++
	c.run[m.Key] = m.Tuple.AgentRunID
	if c.attempts[m.Key] == nil {
		c.attempts[m.Key] = map[int]bool{}
	}
	if c.attempts[m.Key][m.Attempt] {
		c.sameAttempt++
	}
	c.attempts[m.Key][m.Attempt] = true
	c.total++
	if m.Attempt > 1 {
		c.retries++
	}
	if c.n[m.Key] > 1 {
		c.dups++
	}
	at := time.Since(c.start)
	run := m.Tuple.AgentRunID
	if _, ok := c.first[run]; !ok {
		c.first[run] = at
	}
	c.last[run] = at
	if c.failRuns[m.Tuple.AgentRunID] && m.Tuple.StepID == "step-0" {
		c.failOnce[m.Key] = true
	}
	fail := c.failOnce[m.Key] && m.Attempt == 1
	var hold time.Duration
	if c.hold != nil {
		hold = c.hold(m)
	}
	c.active++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.active--
		c.mu.Unlock()
	}()
	if hold > 0 {
		t := time.NewTimer(hold)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return dispatch.Result{Outcome: dispatch.Ambiguous, Reason: "timeout", Err: ctx.Err()}
		}
	}
	if fail {
		return dispatch.Result{Outcome: dispatch.Retry, Status: 503, Reason: "http_503", Err: errors.New("injected failure")}
	}
	return dispatch.Result{Outcome: dispatch.Success, Status: 200}
}

// idle reports whether no call is under way and every key of keys was
// sent (twice for an injected failure).
func (c *counter) idle(keys []string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.active > 0 {
		return false
	}
	for _, k := range keys {
		if c.n[k] == 0 || (c.failOnce[k] && c.n[k] < 2) {
			return false
		}
	}
	return true
}

func (c *counter) distinct() (keys, dups, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.n), c.dups, c.total
}

// check fails t unless every key of keys was dispatched exactly once and
// nothing else was.
func (c *counter) check(t testing.TB, keys []string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		if c.n[k] != 1 {
			t.Errorf("key %s dispatched %d times", k, c.n[k])
		}
	}
	if c.dups != 0 || len(c.n) != len(keys) {
		runs := map[string]int{}
		for k, n := range c.n {
			if n > 1 {
				runs[c.run[k]]++
			}
		}
		t.Errorf("%d keys dispatched (%d more than once, %d dispatches of a later attempt), want %d exactly once; keys sent more than once by run: %v",
			len(c.n), c.dups, c.retries, len(keys), runs)
	}
}

// checkSends fails t unless every key of keys was sent exactly once, but
// those of failOnce: exactly twice, attempt 1 (which failed, injected) and
// then attempt 2. A key sent again for any other reason (a lease that
// lapsed, a replica that gave up rows it was sending) fails it.
func (c *counter) checkSends(t testing.TB, keys []string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var again, missing []string
	for _, k := range keys {
		want := 1
		if c.failOnce[k] {
			want = 2
		}
		switch n := c.n[k]; {
		case n == 0:
			missing = append(missing, k)
		case n != want || (want == 2 && !(c.attempts[k][1] && c.attempts[k][2])):
			again = append(again, fmt.Sprintf("%s (run %s): sent %d times, attempts %v", k, c.run[k], n, slices.Sorted(maps.Keys(c.attempts[k]))))
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d keys never sent, e.g. %v", len(missing), missing[:min(5, len(missing))])
	}
	if len(again) > 0 {
		t.Errorf("%d keys sent other than once (twice for an injected failure), e.g. %v", len(again), again[:min(10, len(again))])
	}
	if len(c.n) != len(keys) {
		t.Errorf("%d keys sent, want %d", len(c.n), len(keys))
	}
}

// checkFenced fails t unless every key of keys was dispatched and no
// attempt of a key was dispatched twice (a broken claim or fence). A row
// sent again with a later attempt after its lease expired is the design
// (the same key goes upstream): on a machine too slow for the lease it is
// reported, not failed, so the verdict does not depend on its speed.
func (c *counter) checkFenced(t testing.TB, keys []string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		if c.n[k] == 0 {
			t.Errorf("key %s never dispatched", k)
		}
	}
	if len(c.n) != len(keys) {
		t.Errorf("%d keys dispatched, want %d", len(c.n), len(keys))
	}
	if c.sameAttempt != 0 {
		t.Errorf("%d dispatches repeated an attempt already sent (a broken claim or fence)", c.sameAttempt)
	}
	if c.retries > 0 {
		t.Logf("%d rows sent again with a later attempt after their lease expired (same key upstream)", c.retries)
	}
}

// routing returns a routing factory sending tool "t" to c, over one
// registry shared by every engine, as `drainer run` does.
func routing(t testing.TB, c *counter) func() *drainer.Routing {
	return routingWithin(t, c, time.Second)
}

// routingWithin is routing with the adapter's call timeout.
func routingWithin(t testing.TB, c *counter, timeout time.Duration) func() *drainer.Routing {
	reg, err := dispatch.NewRegistry(&dispatch.Entry{Name: "p", Type: "test", Adapter: c, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return func() *drainer.Routing {
		return &drainer.Routing{Registry: reg, UnroutedRecheck: 200 * time.Millisecond,
			Compensations: compensations.NewMap(map[string]string{"t": ""}),
			Routes: map[string]*drainer.Route{"t": {Tool: "t", Adapter: "p", Class: "key_idempotent", MaxAttempts: 5,
				Backoff: drainer.Backoff{Base: 10 * time.Millisecond, Cap: 50 * time.Millisecond, MaxRetryAfter: time.Second}}}}
	}
}

// static is a Source of fixed databases of cl.
func static(cl *cluster, names []string) Source {
	return func(context.Context) ([]Database, error) {
		out := make([]Database, len(names))
		for i, n := range names {
			out[i] = Database{Name: n, URL: cl.url(n)}
		}
		return out, nil
	}
}

// replica is one fleet running in the test.
type replica struct {
	*Fleet
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

// startReplica runs a fleet with short timings; mod adjusts its config.
func startReplica(t testing.TB, coord string, src Source, rt func() *drainer.Routing, id string, mod func(*Config)) *replica {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := Config{
		MemberID: id, Source: src, CoordinationURL: coord, Lease: 3 * time.Second, Refresh: 300 * time.Millisecond,
		StopTimeout: 5 * time.Second, Routing: rt, Registerer: reg, Version: "test",
		// The rows' lease is long enough that none expires on a busy box
		// (a row whose lease expires is sent again, by design), so a
		// second dispatch can only come from a broken claim or fence.
		Engine: drainer.Config{Workers: 8, Lease: 20 * time.Second, LeaseMargin: time.Second,
			PollInterval: 100 * time.Millisecond, ReclaimInterval: 200 * time.Millisecond, SnapshotInterval: time.Second},
	}
	if mod != nil {
		mod(&cfg)
	}
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{Fleet: f, reg: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- f.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop ends the replica (leaving the membership unless abandoned) and
// waits for it.
func (r *replica) stop(t testing.TB) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("fleet %s: %v", r.ID(), err)
		}
	case <-time.After(60 * time.Second):
		t.Errorf("fleet %s did not stop", r.ID())
	}
}

// state describes the replicas for a timeout message.
func state(c *counter, rs ...*replica) string {
	n, dups, total := c.distinct()
	out := fmt.Sprintf("%d keys dispatched (%d dispatches, %d duplicates);", n, total, dups)
	for _, r := range rs {
		if r.cancel == nil {
			continue
		}
		out += fmt.Sprintf(" %s drains %d, members %v, unreachable %v, schema_mismatch %v;", r.ID(), len(r.Draining()),
			testutil.ToFloat64(r.m.members), testutil.ToFloat64(r.m.databases.WithLabelValues(stateUnreachable)),
			testutil.ToFloat64(r.m.databases.WithLabelValues(stateSchemaMismatch)))
	}
	return out
}

// owners maps each database to the replicas draining it.
func owners(rs ...*replica) map[string][]string {
	out := map[string][]string{}
	for _, r := range rs {
		if r.cancel == nil {
			continue
		}
		for _, db := range r.Draining() {
			out[db] = append(out[db], r.ID())
		}
	}
	return out
}

// exactlyOneOwner reports whether each of dbs is drained by exactly one replica.
func exactlyOneOwner(dbs []string, rs ...*replica) bool {
	o := owners(rs...)
	for _, db := range dbs {
		if len(o[db]) != 1 {
			return false
		}
	}
	return len(o) == len(dbs)
}

// settled reports whether each of dbs is drained by exactly one replica
// and no replica is still starting or letting go of a database.
func settled(dbs []string, rs ...*replica) bool {
	for _, r := range rs {
		if r.cancel != nil && r.Unsettled() != 0 {
			return false
		}
	}
	return exactlyOneOwner(dbs, rs...)
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	return out
}
