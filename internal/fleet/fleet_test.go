package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestFleetOverlap: two replicas deliberately both drain the same
// databases (as during a hand-over, but for the whole test) while rows
// arrive: every row is dispatched exactly once, by the claims' leases and
// fencing alone.
func TestFleetOverlap(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 200)
	dbs := names("ov", 2)
	cl.createDBs(t, dbs)
	c := newCounter()
	c.delay = time.Millisecond
	rt := routing(t, c)
	all := func(cfg *Config) { cfg.Force = func(string) bool { return true } }
	a := startReplica(t, cl.url(dbs[0]), static(cl, dbs), rt, "a", all)
	b := startReplica(t, cl.url(dbs[0]), static(cl, dbs), rt, "b", all)
	testkit.WaitFor(t, 90*time.Second, "both replicas draining both databases", func() (bool, string) {
		o := owners(a, b)
		return len(o[dbs[0]]) == 2 && len(o[dbs[1]]) == 2, ""
	})
	var keys []string
	for i := range 20 {
		for _, db := range dbs {
			keys = append(keys, cl.enqueue(t, db, strconv.Itoa(i), 50)...)
		}
	}
	testkit.WaitFor(t, 3*time.Minute, "every row dispatched", func() (bool, string) {
		n, _, _ := c.distinct()
		return n >= len(keys), ""
	})
	testkit.WaitFor(t, 90*time.Second, "every row succeeded", func() (bool, string) {
		for _, db := range dbs {
			if cl.statuses(t, db)["succeeded"] != len(keys)/len(dbs) {
				return false, ""
			}
		}
		return true, ""
	})
	c.check(t, keys)
}

// TestFleetHandOver: three replicas share twelve databases, one each. One
// dies (stops without leaving): its databases are drained by the others
// once its membership expires (about a lease). Another leaves (SIGTERM):
// its databases move at the next heartbeat. Every row is dispatched once.
func TestFleetHandOver(t *testing.T) {
	t.Parallel()
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
	testkit.WaitFor(t, 90*time.Second, "each database drained by exactly one replica", func() (bool, string) { return exactlyOneOwner(dbs, rs...), "" })
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
	testkit.WaitFor(t, 3*time.Minute, "the dead replica's databases taken over", func() (bool, string) { return exactlyOneOwner(dbs, rs...), "" })
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
	testkit.WaitFor(t, 3*time.Minute, "the leaver's databases taken over", func() (bool, string) { return exactlyOneOwner(dbs, rs...), "" })
	t.Logf("hand-over after a leave: %s", time.Since(began).Round(10*time.Millisecond))

	testkit.WaitFor(t, 3*time.Minute, "every row dispatched", func() (bool, string) {
		n, _, _ := c.distinct()
		return n >= len(keys), ""
	})
	c.check(t, keys)
}

// TestFleetFaults: beside two good databases, one is unreachable, one is
// not migrated and one needs a newer drainer; the catalog then goes down,
// and later a database is removed from it mid-drain. The good ones drain
// throughout; each fault is counted with the database's name.
func TestFleetFaults(t *testing.T) {
	t.Parallel()
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
	var logs testkit.Buffer
	r := startReplica(t, cl.url("good1"), src, routing(t, c), "solo", func(cfg *Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	var keys []string
	for _, db := range good {
		keys = append(keys, cl.enqueue(t, db, "1", 30)...)
	}
	testkit.WaitFor(t, 3*time.Minute, "good databases drained", func() (bool, string) {
		n, _, _ := c.distinct()
		return n >= len(keys), ""
	})
	testkit.WaitFor(t, 90*time.Second, "each fault counted under its database's name", func() (bool, string) {
		return testutil.ToFloat64(r.m.dbErrors.WithLabelValues("unreachable", reasonUnreachable)) > 0 &&
			testutil.ToFloat64(r.m.dbErrors.WithLabelValues("bare", reasonSchemaMismatch)) > 0 &&
			testutil.ToFloat64(r.m.dbErrors.WithLabelValues("newer", reasonSchemaMismatch)) > 0, ""
	})
	// A schema that is not migrated is told with the command that
	// migrates it in a fleet: by its database's name.
	testkit.WaitFor(t, 30*time.Second, "the fix of bare's schema logged", func() (bool, string) {
		return strings.Contains(logs.String(), `fix="drainer migrate --database bare --config FILE (or drainer migrate --all --config FILE)"`), logs.String()
	})
	// A schema newer than this release is told to upgrade drainer, not
	// to migrate (which changes nothing there).
	testkit.WaitFor(t, 30*time.Second, "the fix of newer's schema logged", func() (bool, string) {
		for line := range strings.SplitSeq(logs.String(), "\n") {
			if strings.Contains(line, "database=newer") && strings.Contains(line, "cannot drain database") {
				return strings.Contains(line, `fix="upgrade drainer to a release that knows this schema"`), line
			}
		}
		return false, "no line"
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
	if v := gatherLabel(t, r, "drainer_claimed_rows_total", "database"); !slices.Contains(v, "good1") || !slices.Contains(v, "good2") {
		t.Errorf("drainer_claimed_rows_total database labels %v, want good1 and good2", v)
	}
	// The build info describes the process: once, with its version and no database.
	if v, d := gatherLabel(t, r, "drainer_build_info", "version"), gatherLabel(t, r, "drainer_build_info", "database"); len(v) != 1 || len(d) != 0 {
		t.Errorf("drainer_build_info: versions %v, databases %v; want one series without a database", v, d)
	}

	// The catalog goes down: draining goes on over the last known list.
	catalogDown.Store(true)
	testkit.WaitFor(t, 90*time.Second, "catalog errors counted", func() (bool, string) { return testutil.ToFloat64(r.m.catalogErrors) > 0, "" })
	more := cl.enqueue(t, "good2", "2", 30)
	keys = append(keys, more...)
	testkit.WaitFor(t, 3*time.Minute, "rows drained while the catalog is down", func() (bool, string) {
		n, _, _ := c.distinct()
		return n >= len(keys), ""
	})
	catalogDown.Store(false)

	// A database removed mid-drain is let go; its metrics go with it.
	gone := cl.enqueue(t, "gone", "1", 200)
	mu.Lock()
	listed = slices.DeleteFunc(listed, func(n string) bool { return n == "gone" })
	mu.Unlock()
	testkit.WaitFor(t, 90*time.Second, "the removed database let go", func() (bool, string) { return !slices.Contains(r.Draining(), "gone"), "" })
	testkit.WaitFor(t, 90*time.Second, "its metrics unregistered", func() (bool, string) {
		return !slices.Contains(gatherLabel(t, r, "drainer_workers", "database"), "gone"), ""
	})
	st := cl.statuses(t, "gone")
	if st["in_flight"] != 0 {
		// Left for the lease: nobody drains it now, so its rows stay put.
		t.Logf("rows left in flight in the removed database: %d", st["in_flight"])
	}
	// An engine that still drained it would hold connections to it (its
	// listener's at least) and could send these rows. An engine's pool
	// closes only after its last call returned: once the database has no
	// connection left, whatever such an engine sent is counted.
	later := cl.enqueue(t, "gone", "2", 5)
	conns := cl.connections(t, []string{"gone"})
	testkit.WaitFor(t, 90*time.Second, "no connection left to the removed database", func() (bool, string) {
		n := conns()
		return n == 0, fmt.Sprint(n, " connections")
	})
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

// TestFleetDatabaseDownWhileDraining: a database that stops answering
// after its engine started is counted unreachable (the gauge, and the
// errors counter the Undrainable alert reads, again while it stays down),
// no longer reported draining, and running again once it answers; before,
// it stayed "running", and nothing could page on it.
func TestFleetDatabaseDownWhileDraining(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 200)
	cl.createDBs(t, []string{"coord1", "down1"})
	src := func(ctx context.Context) ([]Database, error) {
		return []Database{{Name: "down1", URL: cl.url("down1")}}, nil
	}
	c := newCounter()
	r := startReplica(t, cl.url("coord1"), src, routing(t, c), "solo", nil)
	testkit.WaitFor(t, 90*time.Second, "down1 drained", func() (bool, string) {
		return slices.Contains(r.Draining(), "down1"), fmt.Sprint(r.Draining())
	})
	cl.exec(t, "postgres", `ALTER DATABASE down1 ALLOW_CONNECTIONS false`)
	cl.exec(t, "postgres", `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'down1'`)
	testkit.WaitFor(t, 90*time.Second, "down1 counted unreachable", func() (bool, string) {
		g := testutil.ToFloat64(r.m.databases.WithLabelValues(stateUnreachable))
		n := testutil.ToFloat64(r.m.dbErrors.WithLabelValues("down1", reasonUnreachable))
		return g == 1 && n > 0 && !slices.Contains(r.Draining(), "down1"), fmt.Sprint(g, n, r.Draining())
	})
	cl.exec(t, "postgres", `ALTER DATABASE down1 ALLOW_CONNECTIONS true`)
	testkit.WaitFor(t, 90*time.Second, "down1 running again", func() (bool, string) {
		g := testutil.ToFloat64(r.m.databases.WithLabelValues(stateUnreachable))
		return g == 0 && slices.Contains(r.Draining(), "down1"), fmt.Sprint(g, r.Draining())
	})
}

// TestFleetSameDatabaseUnderTwoNames: a database listed under two names
// is drained once, under the first, and the second is named in a warning;
// before, it was drained twice and counted twice.
func TestFleetSameDatabaseUnderTwoNames(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 200)
	cl.createDBs(t, []string{"coord2", "twice"})
	src := func(ctx context.Context) ([]Database, error) {
		return []Database{{Name: "twice", URL: cl.url("twice")}, {Name: "twice_again", URL: cl.url("twice")}}, nil
	}
	var logs testkit.Buffer
	r := startReplica(t, cl.url("coord2"), src, routing(t, newCounter()), "solo", func(cfg *Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	testkit.WaitFor(t, 90*time.Second, "twice drained", func() (bool, string) {
		return slices.Equal(r.Draining(), []string{"twice"}), fmt.Sprint(r.Draining())
	})
	if got := testutil.ToFloat64(r.m.databases.WithLabelValues(stateKnown)); got != 1 {
		t.Errorf("known gauge %v, want 1", got)
	}
	if !strings.Contains(logs.String(), "database listed under two names") || !strings.Contains(logs.String(), "same_as=twice") {
		t.Errorf("no warning naming the second name; logs:\n%s", logs.String())
	}
}
