//go:build integration

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/mockprovider"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5/pgxpool"
)

// chaosFull reports whether the full-size chaos run was asked for
// (DRAINER_CHAOS=full, `make chaos`); otherwise every scenario runs short.
func chaosFull() bool { return os.Getenv("DRAINER_CHAOS") == "full" }

// chaosRows is the number of rows of a scenario in the current mode.
func chaosRows(short, full int) int {
	if chaosFull() {
		return full
	}
	return short
}

// chaosReport collects one line per scenario.
type chaosReport struct {
	mu    sync.Mutex
	lines []string
}

func (r *chaosReport) add(v chaosVerdict) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf("| %s | %d | %d | %d | %d | %d | %.0f |",
		v.scenario, v.rows, v.duplicates, v.lost, v.stuck, v.retryAfterViolations, v.rowsPerSec))
}

func (r *chaosReport) markdown() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	b.WriteString("| scenario | rows | duplicates | lost | stuck | Retry-After violations | rows/s |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
	for _, l := range r.lines {
		b.WriteString(l + "\n")
	}
	return b.String()
}

// chaosSetup is what every scenario starts from: a migrated database, a
// faulty idempotent provider answering some requests 429 with Retry-After,
// a config file, and the enqueued rows.
type chaosSetup struct {
	dbURL    string
	pool     *pgxpool.Pool
	provider *mockprovider.Provider
	cfgPath  string
	keys     []string
	rng      *rand.Rand
	// lossWindows are the times during which a fault between the daemons
	// and the provider may have lost the provider's answers.
	lossWindows []lossWindow
}

// lossWindow is a span of time in which provider answers may be lost.
type lossWindow struct{ from, to time.Time }

// answerLossGrace is how long after a fault ends an answer given during it
// may still be lost or arrive after the adapter's timeout (1s).
const answerLossGrace = 2 * time.Second

// answerMayBeLost reports whether an answer the provider gave at t may not
// have reached the daemon.
func (s *chaosSetup) answerMayBeLost(t time.Time) bool {
	for _, w := range s.lossWindows {
		if !t.Before(w.from) && !t.After(w.to.Add(answerLossGrace)) {
			return true
		}
	}
	return false
}

func newChaosSetup(t *testing.T, rows int, seed uint64) *chaosSetup {
	t.Helper()
	return newChaosSetupVia(t, rows, seed, nil)
}

// newChaosSetupVia is newChaosSetup with the provider's base URL passed
// through via (e.g. to put a proxy in front of it) before it goes into the
// daemons' config.
func newChaosSetupVia(t *testing.T, rows int, seed uint64, via func(baseURL string) string) *chaosSetup {
	t.Helper()
	t.Logf("chaos seed %d (rows %d, full %v)", seed, rows, chaosFull())
	dbURL, pool := newMigratedDB(t)
	provider := mockprovider.New(mockprovider.Config{
		Fail503:           0.08,
		Fail429:           0.05,
		RetryAfterSeconds: 1,
		Fail529:           0.02,
		ResetAfterEffect:  0.03,
		Timeout:           0.01,
		TimeoutDelay:      2 * time.Second,
		VerifyTuple:       true,
		Seed:              int64(seed),
	})
	baseURL, err := provider.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(provider.Close)
	if via != nil {
		baseURL = via(baseURL)
	}
	cfg := chaosConfig(baseURL)
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", cfg)
	keys := enqueueCharges(t, pool, rows)
	return &chaosSetup{dbURL: dbURL, pool: pool, provider: provider, cfgPath: cfgPath, keys: keys,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (s *chaosSetup) start(t *testing.T, name string) *daemon {
	return startDaemon(t, name, "--config", s.cfgPath, "--database-url", s.dbURL, "--shutdown-timeout", "10s")
}

// waitSettled waits (generously: minutes, whatever the machine) until no
// row is pending or in_flight, calling tick between polls.
func (s *chaosSetup) waitSettled(t *testing.T, tick func()) {
	t.Helper()
	testkit.WaitFor(t, chaosSettleBound(), "every row terminal or parked", func() (bool, string) {
		if tick != nil {
			tick()
		}
		c := statusCounts(t, s.pool)
		return c["pending"] == 0 && c["in_flight"] == 0, fmt.Sprint(c)
	})
}

var chaosResults chaosReport

// TestChaos runs every fault scenario against real `drainer run` processes,
// real Postgres and a fault-injecting provider, and checks the invariants
// of chaosCheck after each. DRAINER_CHAOS=full runs the full sizes;
// DRAINER_CHAOS_REPORT=path writes the report table there.
func TestChaos(t *testing.T) {
	t.Parallel()
	baseSeed := uint64(time.Now().UnixNano())
	if v := os.Getenv("DRAINER_CHAOS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("DRAINER_CHAOS_SEED: %v", err)
		}
		baseSeed = n
	}
	t.Logf("chaos base seed %d (set DRAINER_CHAOS_SEED to reproduce)", baseSeed)

	t.Run("sigkill_replicas", func(t *testing.T) { chaosSIGKILL(t, baseSeed+1) })
	t.Run("rolling_sigterm", func(t *testing.T) { chaosRollingSIGTERM(t, baseSeed+2) })
	t.Run("xmin_holder", func(t *testing.T) { chaosXminHolder(t, baseSeed+3) })
	t.Run("toxiproxy", func(t *testing.T) { chaosToxiproxy(t, baseSeed+4) })
	t.Run("clock_skew", func(t *testing.T) { chaosClockSkew(t, baseSeed+5) })
	t.Run("saga_storm", func(t *testing.T) { chaosSagaStorm(t, baseSeed+6) })
	t.Run("postgres_restart", func(t *testing.T) { chaosPostgresRestart(t, baseSeed+9) })
	t.Run("postgres_stall", func(t *testing.T) { chaosPostgresStall(t, baseSeed+10) })
	t.Run("operator_actions", func(t *testing.T) { chaosOperatorActions(t, baseSeed+8) })
	t.Run("soak", func(t *testing.T) { chaosSoak(t, baseSeed+7) })

	report := chaosResults.markdown()
	t.Logf("chaos report:\n%s", report)
	if p := os.Getenv("DRAINER_CHAOS_REPORT"); p != "" {
		if err := os.WriteFile(p, []byte(report), 0o644); err != nil {
			t.Errorf("write report: %v", err)
		}
	}
}

// chaosSIGKILL: 5 replicas drain while a random one is SIGKILLed every few
// seconds and restarted.
func chaosSIGKILL(t *testing.T, seed uint64) {
	s := newChaosSetup(t, chaosRows(500, 50000), seed)
	replicas := make([]*daemon, 5)
	for i := range replicas {
		replicas[i] = s.start(t, "replica-"+strconv.Itoa(i))
	}
	start := time.Now()
	kills, gen := 0, 0
	next := time.Now().Add(500 * time.Millisecond)
	maxKills := chaosRows(4, 40)
	s.waitSettled(t, func() {
		if kills >= maxKills || time.Now().Before(next) {
			return
		}
		i := s.rng.IntN(len(replicas))
		replicas[i].signal(syscall.SIGKILL)
		replicas[i].wait(30 * time.Second)
		gen++
		replicas[i] = s.start(t, fmt.Sprintf("replica-%d.%d", i, gen))
		kills++
		next = time.Now().Add(time.Duration(300+s.rng.IntN(1500)) * time.Millisecond)
	})
	elapsed := time.Since(start)
	t.Logf("%d SIGKILLs", kills)
	chaosResults.add(chaosCheck(t, "sigkill_replicas", s, elapsed))
	for _, r := range replicas {
		r.signal(syscall.SIGTERM)
	}
	for _, r := range replicas {
		r.wait(30 * time.Second)
	}
}

// chaosRollingSIGTERM: 3 replicas drain while each in turn is SIGTERMed,
// waited for, and replaced.
func chaosRollingSIGTERM(t *testing.T, seed uint64) {
	s := newChaosSetup(t, chaosRows(400, 20000), seed)
	replicas := make([]*daemon, 3)
	for i := range replicas {
		replicas[i] = s.start(t, "replica-"+strconv.Itoa(i))
	}
	start := time.Now()
	for round := 0; round < chaosRows(1, 3); round++ {
		for i := range replicas {
			// SIGTERM is a shutdown only once the daemon handles it: a
			// process signalled before it gets there is killed. Ready, it
			// does.
			replicas[i].waitReady(2 * time.Minute)
			time.Sleep(time.Second)
			replicas[i].signal(syscall.SIGTERM)
			if code := replicas[i].exitCode(60 * time.Second); code != 0 {
				t.Errorf("%s exited %d after SIGTERM, want 0", replicas[i].name, code)
			}
			replicas[i] = s.start(t, fmt.Sprintf("replica-%d.%d", i, round+1))
		}
	}
	s.waitSettled(t, nil)
	chaosResults.add(chaosCheck(t, "rolling_sigterm", s, time.Since(start)))
	for _, r := range replicas {
		r.signal(syscall.SIGTERM)
	}
	for _, r := range replicas {
		r.wait(30 * time.Second)
	}
}

// chaosXminHolder: a session keeps a REPEATABLE READ snapshot open (holding
// back xmin) for the whole drain.
func chaosXminHolder(t *testing.T, seed uint64) {
	s := newChaosSetup(t, chaosRows(400, 20000), seed)
	ctx := context.Background()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	replicas := make([]*daemon, 2)
	for i := range replicas {
		replicas[i] = s.start(t, "replica-"+strconv.Itoa(i))
	}
	start := time.Now()
	s.waitSettled(t, nil)
	elapsed := time.Since(start)
	_ = tx.Rollback(ctx)
	conn.Release()
	chaosResults.add(chaosCheck(t, "xmin_holder", s, elapsed))
	for _, r := range replicas {
		r.signal(syscall.SIGTERM)
	}
	for _, r := range replicas {
		r.wait(30 * time.Second)
	}
}

// drained reports whether no row is pending or in_flight.
func (s *chaosSetup) drained(t *testing.T) bool {
	t.Helper()
	c := statusCounts(t, s.pool)
	return c["pending"] == 0 && c["in_flight"] == 0
}

// chaosClockSkew: three replicas whose wall clocks are wrong (one an hour
// ahead, one ten minutes behind, one right) drain together; the database
// clock rules scheduling and leases, so nothing is sent early (Retry-After)
// and no lease is stolen.
func chaosClockSkew(t *testing.T, seed uint64) {
	s := newChaosSetup(t, chaosRows(400, 20000), seed)
	skews := []string{"1h", "-10m", "0s"}
	replicas := make([]*daemon, len(skews))
	for i, sk := range skews {
		replicas[i] = startDaemonEnv(t, "replica-skew"+sk, []string{"DRAINER_TEST_CLOCK_SKEW=" + sk},
			"--config", s.cfgPath, "--database-url", s.dbURL, "--shutdown-timeout", "10s")
	}
	start := time.Now()
	s.waitSettled(t, func() {
		for _, r := range replicas {
			r.requireRunning()
		}
	})
	chaosResults.add(chaosCheck(t, "clock_skew", s, time.Since(start)))
	for _, r := range replicas {
		r.signal(syscall.SIGTERM)
	}
	for _, r := range replicas {
		r.wait(30 * time.Second)
	}
}

// chaosSettleBound is how long a scenario may take to settle: generous in
// both modes, so only a row that never settles fails the wait.
func chaosSettleBound() time.Duration {
	if chaosFull() {
		return 60 * time.Minute
	}
	return 5 * time.Minute
}

// chaosConfig is the daemons' config of the chaos scenarios: the
// provider at baseURL behind one key_idempotent route, charge_card.
func chaosConfig(baseURL string) string {
	return fmt.Sprintf(`workers: 8
lease: 7s
adapters:
  provider:
    type: http
    url: %s/{tool_name}
    timeout: 1s
    breaker: {consecutive_failures: 5, open_for: 1s}
routes:
  charge_card:
    adapter: provider
    class: key_idempotent
    max_attempts: 50
    backoff: {base: 50ms, cap: 500ms, max_retry_after: 5s}
    reclaim_hold: 1s
`, baseURL)
}
