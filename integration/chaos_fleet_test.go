//go:build integration

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/drainer-io/drainer/tooling/mockprovider"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestChaosFleet: real `drainer run` processes drain many databases listed
// by a catalog query, as one fleet, against a fault-injecting provider,
// while a replica is SIGKILLed and restarted and a database is dropped from
// the catalog (rows arriving meanwhile) and added back. Every database then
// holds the invariants of chaosCheck: nothing lost, nothing sent twice,
// nothing stuck. Short: 10 databases, 3 replicas; DRAINER_CHAOS=full: 50
// databases, 4 replicas, more rows and kills.
func TestChaosFleet(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("DRAINER_CHAOS_SEED"), 10, 64); err == nil {
		seed = v
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	nDB, nReplicas, perDB, kills := chaosRows(10, 50), chaosRows(3, 4), chaosRows(60, 400), chaosRows(1, 4)
	t.Logf("chaos fleet seed %d: %d databases, %d replicas, %d rows each", seed, nDB, nReplicas, perDB)

	provider := mockprovider.New(mockprovider.Config{
		Fail503: 0.08, Fail429: 0.05, RetryAfterSeconds: 1, ResetAfterEffect: 0.03,
		Timeout: 0.01, TimeoutDelay: 2 * time.Second, VerifyTuple: true, Seed: int64(seed),
	})
	baseURL, err := provider.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(provider.Close)

	catalogURL := dbtest.NewDatabase(t)
	catalog, err := pgxpool.New(context.Background(), catalogURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(catalog.Close)
	if _, err := catalog.Exec(context.Background(), `CREATE TABLE tenants (name text PRIMARY KEY, url text NOT NULL, active bool NOT NULL DEFAULT true)`); err != nil {
		t.Fatal(err)
	}
	setups := make([]*chaosSetup, nDB)
	names := make([]string, nDB)
	for i := range setups {
		url, pool := newMigratedDB(t)
		names[i] = fmt.Sprintf("tenant-%02d", i)
		if _, err := catalog.Exec(context.Background(), `INSERT INTO tenants (name, url) VALUES ($1, $2)`, names[i], url); err != nil {
			t.Fatal(err)
		}
		setups[i] = &chaosSetup{dbURL: url, pool: pool, provider: provider,
			keys: enqueueChargesFrom(t, pool, i*1_000_000, perDB)}
	}
	cfg := chaosConfig(baseURL) + fmt.Sprintf(`databases:
  query:
    url: %q
    sql: SELECT name, url FROM tenants WHERE active
  refresh: 1s
`, catalogURL)
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", cfg)
	start := func(name string) *daemon {
		return startDaemon(t, name, "--config", cfgPath, "--shutdown-timeout", "10s")
	}
	replicas := make([]*daemon, nReplicas)
	for i := range replicas {
		replicas[i] = start("replica-" + strconv.Itoa(i))
	}
	began := time.Now()

	// The faults, one per tick until done: kills of a random replica, then
	// a database dropped from the catalog (with rows enqueued while it is
	// out) and added back.
	dropped := names[rng.IntN(nDB)]
	var droppedAt time.Time
	gen, killed, readded := 0, 0, false
	next := time.Now().Add(time.Second)
	tick := func() {
		if time.Now().Before(next) {
			return
		}
		next = time.Now().Add(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		switch {
		case killed < kills:
			i := rng.IntN(len(replicas))
			replicas[i].signal(syscall.SIGKILL)
			_ = replicas[i].wait(30 * time.Second)
			gen++
			replicas[i] = start(fmt.Sprintf("replica-%d.%d", i, gen))
			killed++
		case droppedAt.IsZero():
			if _, err := catalog.Exec(context.Background(), `UPDATE tenants SET active = false WHERE name = $1`, dropped); err != nil {
				t.Fatal(err)
			}
			droppedAt = time.Now()
			i := indexOf(names, dropped)
			setups[i].keys = append(setups[i].keys, enqueueChargesFrom(t, setups[i].pool, i*1_000_000+perDB, perDB/2)...)
			next = time.Now().Add(3 * time.Second)
		case !readded:
			if _, err := catalog.Exec(context.Background(), `UPDATE tenants SET active = true WHERE name = $1`, dropped); err != nil {
				t.Fatal(err)
			}
			readded = true
		}
	}
	testkit.WaitFor(t, chaosSettleBound(), "every database's rows terminal or parked", func() (bool, string) {
		tick()
		if !readded {
			return false, fmt.Sprintf("faults under way (%d kills of %d)", killed, kills)
		}
		for i, s := range setups {
			c := statusCounts(t, s.pool)
			if c["pending"] != 0 || c["in_flight"] != 0 {
				return false, fmt.Sprintf("%s: %v", names[i], c)
			}
		}
		return true, ""
	})
	elapsed := time.Since(began)
	total := chaosVerdict{scenario: "fleet"}
	for i, s := range setups {
		v := chaosCheck(t, "fleet/"+names[i], s, elapsed)
		total.rows += v.rows
		total.duplicates += v.duplicates
		total.lost += v.lost
		total.stuck += v.stuck
		total.retryAfterViolations += v.retryAfterViolations
	}
	t.Logf("fleet: %d databases, %d replicas, %d kills, %s dropped and re-added: rows %d, duplicates %d, lost %d, stuck %d, %.0f rows/s",
		nDB, nReplicas, killed, dropped, total.rows, total.duplicates, total.lost, total.stuck, float64(total.rows)/elapsed.Seconds())
	for _, r := range replicas {
		r.signal(syscall.SIGTERM)
	}
	for _, r := range replicas {
		if err := r.wait(30 * time.Second); err != nil {
			t.Errorf("%s: %v", r.name, err)
		}
	}
}

func indexOf(names []string, name string) int {
	for i, n := range names {
		if n == name {
			return i
		}
	}
	return -1
}
