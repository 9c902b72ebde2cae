package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestFleetCoordinationUnreachableAtStart: the coordination database is
// the first static database by name, and it is unreachable when the
// replica starts. The replica does not wait for it: it drains the
// reachable database as a fleet of one, retries the membership at each
// heartbeat, and names the coordination database (never its url) in the
// log lines, counting its failures under its name.
func TestFleetCoordinationUnreachableAtStart(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 100)
	cl.createDBs(t, []string{"b-good"})
	down := "postgres://drainer:hunter2@127.0.0.1:1/x?sslmode=disable&connect_timeout=1"
	src := func() Source {
		good := static(cl, []string{"b-good"})
		return func(ctx context.Context) ([]Database, error) {
			dbs, err := good(ctx)
			return append([]Database{{Name: "a-down", URL: down}}, dbs...), err
		}
	}()
	logs := &testkit.Buffer{}
	c := newCounter()
	r := startReplica(t, down, src, routing(t, c), "solo", func(cfg *Config) {
		cfg.CoordinationName = "a-down"
		cfg.Known = []string{"a-down", "b-good"}
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	keys := cl.enqueue(t, "b-good", "1", 10)
	testkit.WaitFor(t, 3*time.Minute, "the reachable database drained while the coordination database is down", func() (bool, string) {
		return c.idle(keys), state(c, r)
	})
	c.check(t, keys)
	select {
	case <-r.Started():
	default:
		t.Error("Started not closed, though the replica drains")
	}
	testkit.WaitFor(t, time.Minute, "the coordination database's failures counted under its name", func() (bool, string) {
		n := testutil.ToFloat64(r.m.dbErrors.WithLabelValues("a-down", reasonUnreachable))
		return n > 0 && testutil.ToFloat64(r.m.coordErrors) > 0, fmt.Sprint(n, " errors counted for a-down")
	})
	var named bool
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "hunter2") {
			t.Errorf("a log line holds the coordination database's password: %s", line)
		}
		if strings.Contains(line, "fleet membership") && strings.Contains(line, "coordination_database=a-down") &&
			strings.Contains(line, "fleet of one") {
			named = true
		}
	}
	if !named {
		t.Errorf("no membership failure names the coordination database a-down and the fleet of one; logs:\n%s", logs.String())
	}
}

// TestFleetCoordinationComesBack: two replicas start while the
// coordination database does not exist yet. Each drains every database
// alone (both of them at once: the claims keep each row sent once). Once
// the coordination database exists, both join one membership and the
// databases are shared out, each drained by exactly one of them, every
// row sent exactly once.
func TestFleetCoordinationComesBack(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 100)
	dbs := names("cb", 4)
	cl.createDBs(t, dbs)
	c := newCounter()
	coord := cl.url("coordlater")
	mod := func(cfg *Config) { cfg.CoordinationName = "coordlater" }
	a := startReplica(t, coord, static(cl, dbs), routing(t, c), "a", mod)
	b := startReplica(t, coord, static(cl, dbs), routing(t, c), "b", mod)
	var keys []string
	for _, db := range dbs {
		keys = append(keys, cl.enqueue(t, db, "1", 10)...)
	}
	testkit.WaitFor(t, 3*time.Minute, "both replicas drain every database alone", func() (bool, string) {
		return slices.Equal(a.Draining(), dbs) && slices.Equal(b.Draining(), dbs) && c.idle(keys), state(c, a, b)
	})
	cl.exec(t, "postgres", "CREATE DATABASE coordlater")
	testkit.WaitFor(t, 3*time.Minute, "the databases shared out once the membership answers", func() (bool, string) {
		return settled(dbs, a, b), fmt.Sprint(owners(a, b))
	})
	for _, db := range dbs {
		keys = append(keys, cl.enqueue(t, db, "2", 10)...)
	}
	testkit.WaitFor(t, 3*time.Minute, "every row sent once the fleet shares the databases", func() (bool, string) {
		return c.idle(keys), state(c, a, b)
	})
	c.check(t, keys)
	if got := testutil.ToFloat64(a.m.members); got != 2 {
		t.Errorf("replica a sees %v members, want 2", got)
	}
}
