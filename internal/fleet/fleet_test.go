package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestFleetOverlap: two replicas deliberately both drain the same
// databases (as during a hand-over, but for the whole test) while rows
// arrive: every row is dispatched exactly once, by the claims' leases and
// fencing alone.
func TestFleetOverlap(t *testing.T) {
	cl := newCluster(t, 200)
	dbs := names("ov", 2)
	cl.createDBs(t, dbs)
	c := newCounter()
	c.delay = time.Millisecond
	rt := routing(t, c)
	all := func(cfg *Config) { cfg.Force = func(string) bool { return true } }
	a := startReplica(t, cl.url(dbs[0]), static(cl, dbs), rt, "a", all)
	b := startReplica(t, cl.url(dbs[0]), static(cl, dbs), rt, "b", all)
	waitFor(t, "both replicas draining both databases", 30*time.Second, func() bool {
		o := owners(a, b)
		return len(o[dbs[0]]) == 2 && len(o[dbs[1]]) == 2
	})
	var keys []string
	for i := range 20 {
		for _, db := range dbs {
			keys = append(keys, cl.enqueue(t, db, strconv.Itoa(i), 50)...)
		}
	}
	waitFor(t, "every row dispatched", 60*time.Second, func() bool {
		n, _, _ := c.distinct()
		return n >= len(keys)
	})
	waitFor(t, "every row succeeded", 30*time.Second, func() bool {
		for _, db := range dbs {
			if cl.statuses(t, db)["succeeded"] != len(keys)/len(dbs) {
				return false
			}
		}
		return true
	})
	c.check(t, keys)
}

// TestFleetHandOver: three replicas share twelve databases, one each. One
// dies (stops without leaving): its databases are drained by the others
// once its membership expires (about a lease). Another leaves (SIGTERM):
// its databases move at the next heartbeat. Every row is dispatched once.
func TestFleetHandOver(t *testing.T) {
	cl := newCluster(t, 300)
	dbs := names("ho", 12)
	cl.createDBs(t, dbs)
	c := newCounter()
	rt := routing(t, c)
	coord := cl.url(dbs[0])
	rs := []*replica{
		startReplica(t, coord, static(cl, dbs), rt, "r1", nil),
		startReplica(t, coord, static(cl, dbs), rt, "r2", nil),
		startReplica(t, coord, static(cl, dbs), rt, "r3", nil),
	}
	waitFor(t, "each database drained by exactly one replica", 30*time.Second, func() bool { return exactlyOneOwner(dbs, rs...) })
	var keys []string
	for _, db := range dbs {
		keys = append(keys, cl.enqueue(t, db, "1", 20)...)
	}

	// A death: the replica with the most databases stops without leaving.
	victim := slices.MaxFunc(rs, func(x, y *replica) int { return len(x.Draining()) - len(y.Draining()) })
	lost := victim.Draining()
	victim.Abandon()
	began := time.Now()
	victim.stop(t)
	for _, db := range lost {
		keys = append(keys, cl.enqueue(t, db, "2", 20)...)
	}
	waitFor(t, "the dead replica's databases taken over", 60*time.Second, func() bool { return exactlyOneOwner(dbs, rs...) })
	t.Logf("hand-over after a death: %d databases in %s (lease 3s)", len(lost), time.Since(began).Round(10*time.Millisecond))

	// A leave: the next replica stops normally.
	var leaver *replica
	for _, r := range rs {
		if r != victim && len(r.Draining()) > 0 {
			leaver = r
			break
		}
	}
	began = time.Now()
	leaver.stop(t)
	for _, db := range dbs {
		keys = append(keys, cl.enqueue(t, db, "3", 20)...)
	}
	waitFor(t, "the leaver's databases taken over", 60*time.Second, func() bool { return exactlyOneOwner(dbs, rs...) })
	t.Logf("hand-over after a leave: %s", time.Since(began).Round(10*time.Millisecond))

	waitFor(t, "every row dispatched", 60*time.Second, func() bool {
		n, _, _ := c.distinct()
		return n >= len(keys)
	})
	c.check(t, keys)
}

// TestFleetFaults: beside two good databases, one is unreachable, one is
// not migrated and one needs a newer drainer; the catalog then goes down,
// and later a database is removed from it mid-drain. The good ones drain
// throughout; each fault is counted with the database's name.
func TestFleetFaults(t *testing.T) {
	cl := newCluster(t, 200)
	good := []string{"good1", "good2"}
	cl.createDBs(t, append(slices.Clone(good), "newer", "gone"))
	cl.exec(t, "postgres", "CREATE DATABASE bare")
	cl.exec(t, "newer", "UPDATE drainer.schema_meta SET value = '9999' WHERE name = 'min_daemon_schema_version'")

	var catalogDown atomic.Bool
	var mu sync.Mutex
	listed := []string{"good1", "good2", "newer", "bare", "unreachable", "gone"}
	src := func(ctx context.Context) ([]Database, error) {
		mu.Lock()
		defer mu.Unlock()
		var out []Database
		for _, n := range listed {
			url := cl.url(n)
			if n == "unreachable" {
				url = "postgres://drainer:secret@127.0.0.1:1/x?sslmode=disable&connect_timeout=1"
			}
			out = append(out, Database{Name: n, URL: url})
		}
		if catalogDown.Load() {
			return out, errors.New("catalog: connection refused")
		}
		return out, nil
	}
	c := newCounter()
	r := startReplica(t, cl.url("good1"), src, routing(t, c), "solo", nil)
	var keys []string
	for _, db := range good {
		keys = append(keys, cl.enqueue(t, db, "1", 30)...)
	}
	waitFor(t, "good databases drained", 60*time.Second, func() bool {
		n, _, _ := c.distinct()
		return n >= len(keys)
	})
	waitFor(t, "each fault counted under its database's name", 30*time.Second, func() bool {
		return testutil.ToFloat64(r.m.dbErrors.WithLabelValues("unreachable", reasonUnreachable)) > 0 &&
			testutil.ToFloat64(r.m.dbErrors.WithLabelValues("bare", reasonSchemaMismatch)) > 0 &&
			testutil.ToFloat64(r.m.dbErrors.WithLabelValues("newer", reasonSchemaMismatch)) > 0
	})
	if got := testutil.ToFloat64(r.m.databases.WithLabelValues(stateSchemaMismatch)); got != 2 {
		t.Errorf("schema_mismatch gauge %v, want 2", got)
	}
	if got := testutil.ToFloat64(r.m.databases.WithLabelValues(stateUnreachable)); got != 1 {
		t.Errorf("unreachable gauge %v, want 1", got)
	}
	if got := r.Draining(); !slices.Equal(got, []string{"gone", "good1", "good2"}) {
		t.Errorf("draining %v", got)
	}
	// The engines' metrics carry the database label.
	if n := testutil.CollectAndCount(r.reg, "drainer_dispatch_total"); n == 0 {
		t.Error("no drainer_dispatch_total series")
	}
	if v := gatherLabel(t, r, "drainer_workers", "database"); !slices.Contains(v, "good1") {
		t.Errorf("drainer_workers database labels %v", v)
	}
	// The build info describes the process: once, with its version and no database.
	if v, d := gatherLabel(t, r, "drainer_build_info", "version"), gatherLabel(t, r, "drainer_build_info", "database"); len(v) != 1 || len(d) != 0 {
		t.Errorf("drainer_build_info: versions %v, databases %v; want one series without a database", v, d)
	}

	// The catalog goes down: draining goes on over the last known list.
	catalogDown.Store(true)
	waitFor(t, "catalog errors counted", 30*time.Second, func() bool { return testutil.ToFloat64(r.m.catalogErrors) > 0 })
	more := cl.enqueue(t, "good2", "2", 30)
	keys = append(keys, more...)
	waitFor(t, "rows drained while the catalog is down", 60*time.Second, func() bool {
		n, _, _ := c.distinct()
		return n >= len(keys)
	})
	catalogDown.Store(false)

	// A database removed mid-drain is let go; its metrics go with it.
	gone := cl.enqueue(t, "gone", "1", 200)
	mu.Lock()
	listed = slices.DeleteFunc(listed, func(n string) bool { return n == "gone" })
	mu.Unlock()
	waitFor(t, "the removed database let go", 30*time.Second, func() bool { return !slices.Contains(r.Draining(), "gone") })
	waitFor(t, "its metrics unregistered", 30*time.Second, func() bool {
		return !slices.Contains(gatherLabel(t, r, "drainer_workers", "database"), "gone")
	})
	st := cl.statuses(t, "gone")
	if st["in_flight"] != 0 {
		// Left for the lease: nobody drains it now, so its rows stay put.
		t.Logf("rows left in flight in the removed database: %d", st["in_flight"])
	}
	later := cl.enqueue(t, "gone", "2", 5)
	time.Sleep(time.Second)
	c.mu.Lock()
	for _, k := range later {
		if c.n[k] != 0 {
			t.Errorf("row %s of a removed database dispatched", k)
		}
	}
	c.mu.Unlock()
	c.mu.Lock()
	for _, k := range gone {
		if c.n[k] > 1 {
			t.Errorf("row %s dispatched %d times", k, c.n[k])
		}
	}
	c.mu.Unlock()
	c.check(t, append(keys, dispatched(c, gone)...))
}

// dispatched returns those of keys c saw.
func dispatched(c *counter, keys []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, k := range keys {
		if c.n[k] > 0 {
			out = append(out, k)
		}
	}
	return out
}

// gatherLabel returns the values of label on metric name in r's registry.
func gatherLabel(t testing.TB, r *replica, name, label string) []string {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					out = append(out, l.GetValue())
				}
			}
		}
	}
	return out
}

// TestFleetScale: 200 databases (DRAINER_FLEET_SCALE_DBS overrides), three
// replicas in one process, rows in every database: every row is dispatched
// under one claim and fence (no attempt sent twice; a row whose lease
// expired on a machine too slow for it is sent again with its key, and
// counted), and once the assignment has settled the fleet holds at most
// 2·D + 2·R server connections to them.
func TestFleetScale(t *testing.T) {
	d := 200
	if v, err := strconv.Atoi(os.Getenv("DRAINER_FLEET_SCALE_DBS")); err == nil && v > 0 {
		d = v
	}
	const r, perDB, backlogRows = 3, 20, 500
	began := time.Now()
	// Room for a transient overlap (replicas starting together) beyond
	// the steady-state bound the test checks.
	cl := newCluster(t, 4*d+2*r+100)
	t.Logf("cluster ready in %s", time.Since(began).Round(time.Millisecond))
	dbs := names("s", d)
	began = time.Now()
	cl.createDBs(t, dbs)
	t.Logf("%d databases created in %s", d, time.Since(began).Round(time.Millisecond))
	var keys []string
	var kmu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, db := range dbs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			k := cl.enqueue(t, db, "1", perDB)
			kmu.Lock()
			keys = append(keys, k...)
			kmu.Unlock()
		}()
	}
	wg.Wait()
	t.Logf("%d databases created and filled in %s", d, time.Since(began).Round(time.Millisecond))

	conns := cl.connections(t, dbs)
	c := newCounter()
	rt := routing(t, c)
	coord := cl.url(dbs[0])
	var rs []*replica
	for i := range r {
		rs = append(rs, startReplica(t, coord, static(cl, dbs), rt, "rep"+strconv.Itoa(i), func(cfg *Config) {
			// The engines' own defaults, but for a shorter poll: 200
			// engines polling every few hundred milliseconds are the load.
			cfg.Refresh = 5 * time.Second
			// Heartbeats every 5 s, each allowed 5 s: 200 engines starting
			// on two busy cores (and the race detector) slow every
			// statement, and a member whose beats time out for 10 s would
			// expire and the databases move for nothing. The hand-over
			// times are TestFleetHandOver's, with its 3 s lease.
			cfg.Lease = 15 * time.Second
			cfg.Engine.PollInterval = 250 * time.Millisecond
			cfg.Engine.ReclaimInterval, cfg.Engine.SnapshotInterval = 2*time.Second, 10*time.Second
		}))
	}
	// A sample counts against the bound when the assignment was settled
	// both before and after it was taken.
	maxConns, settledMax, samples := 0, 0, 0
	sample := func() int {
		before := settled(dbs, rs...)
		n := conns()
		if before && settled(dbs, rs...) {
			settledMax, samples = max(settledMax, n), samples+1
		}
		maxConns = max(maxConns, n)
		return n
	}
	patience := time.Duration(max(1, d/100)) * 2 * time.Minute
	waitForState(t, "every row dispatched", patience, func() (bool, string) {
		n := sample()
		got, _, _ := c.distinct()
		return got >= len(keys), fmt.Sprintf("%d connections; %s", n, state(c, rs...))
	})
	elapsed := time.Since(c.start)
	waitFor(t, "the assignment settled", patience, func() bool { return settled(dbs, rs...) })
	for range 10 { // steady state, idle: pools and polls only
		sample()
		time.Sleep(100 * time.Millisecond)
	}
	c.checkFenced(t, keys)

	bound := 2*d + 2*r
	var worstFirst, worstLast time.Duration
	c.mu.Lock()
	for _, l := range c.first {
		worstFirst = max(worstFirst, l)
	}
	for _, l := range c.last {
		worstLast = max(worstLast, l)
	}
	c.mu.Unlock()
	share := map[string]int{}
	for _, x := range rs {
		share[x.ID()] = len(x.Draining())
	}
	t.Logf("D=%d R=%d: %d rows in %s (%.0f rows/s from fleet start); connections max %d overall, %d settled (bound %d); "+
		"from fleet start, worst per-database wait for its first row %s, for its last %s; databases per replica %v",
		d, r, len(keys), elapsed.Round(time.Millisecond), float64(len(keys))/elapsed.Seconds(), maxConns, settledMax, bound,
		worstFirst.Round(time.Millisecond), worstLast.Round(time.Millisecond), share)
	// Steady state: one row more in every database, while one database
	// holds a backlog; how long did each database's row wait?
	backlog := cl.enqueue(t, dbs[d-1], "backlog", backlogRows)
	enqueued := sync.Map{}
	var more []string
	wg = sync.WaitGroup{}
	for _, db := range dbs[:d-1] {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			k := cl.enqueue(t, db, "2", 1)
			enqueued.Store("run-"+db+"-2", time.Since(c.start)) // committed by now
			kmu.Lock()
			more = append(more, k...)
			kmu.Unlock()
		}()
	}
	wg.Wait()
	keys = append(append(keys, more...), backlog...)
	waitForState(t, "the steady-state rows dispatched", patience, func() (bool, string) {
		sample()
		got, _, _ := c.distinct()
		return got >= len(keys), state(c, rs...)
	})
	c.checkFenced(t, keys)
	var worstWait time.Duration
	c.mu.Lock()
	enqueued.Range(func(run, at any) bool {
		worstWait = max(worstWait, c.first[run.(string)]-at.(time.Duration))
		return true
	})
	c.mu.Unlock()
	t.Logf("steady state: worst wait of a row in one of %d databases beside a %d-row backlog in another: %s (poll 250ms; from the enqueue's commit, as the test saw it return)",
		d-1, backlogRows, worstWait.Round(time.Millisecond))
	// Stop the replicas together, as a fleet's rollout would not, but
	// the test need not wait for each in turn.
	var stopping sync.WaitGroup
	for _, x := range rs {
		stopping.Go(func() { x.stop(t) })
	}
	stopping.Wait()
	t.Logf("connections while settled, through the steady-state phase: max %d over %d samples (bound %d)", settledMax, samples, bound)
	if samples < 5 {
		t.Errorf("only %d samples taken while the assignment was settled", samples)
	}
	if settledMax > bound {
		t.Errorf("%d connections once settled, bound 2·D+2·R = %d", settledMax, bound)
	}
}
