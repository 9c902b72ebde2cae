//go:build integration

package integration

import (
	"fmt"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestSIGKILLedFleetReplicasDatabasesAreDrainedWithinSeconds: the fleet
// form of TestSIGKILLedReplicasRowsAreSentAgainWithinSeconds. A replica of
// a fleet, the only member, is SIGKILLed with rows in flight in each of its
// databases; a new replica joins. Its databases move to the newcomer once
// the dead member's heartbeats expire (within the lease), and each stranded
// row is sent again, with its key, within handOverBound of its lease
// expiry.
func TestSIGKILLedFleetReplicasDatabasesAreDrainedWithinSeconds(t *testing.T) {
	t.Parallel()
	provider := &reclaimProvider{sent: map[string][]time.Time{}, closed: make(chan struct{})}
	srv := httptest.NewServer(provider)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(provider.closed) })

	const nDB, perDB = 4, 2
	pools := make([]*pgxpool.Pool, nDB)
	static := ""
	for i := range pools {
		var url string
		url, pools[i] = newMigratedDB(t)
		static += fmt.Sprintf("    - {name: tenant-%d, url: %q}\n", i, url)
	}
	cfg := fmt.Sprintf(`workers: 16
lease: 11s
adapters:
  provider:
    type: http
    url: %s/{tool_name}
    timeout: 5s
    breaker: {consecutive_failures: 0}
routes:
  charge:
    adapter: provider
    class: key_idempotent
databases:
  static:
%s`, srv.URL, static)
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", cfg)

	provider.mu.Lock()
	provider.hang = true
	provider.mu.Unlock()
	victim := startDaemon(t, "victim", "--config", cfgPath)
	keys := make([][]string, nDB)
	for i, pool := range pools {
		keys[i] = enqueueTools(t, pool, fmt.Sprintf("run-%d", i), "charge", perDB)
	}
	testkit.WaitFor(t, 2*time.Minute, "every database's rows in flight at the provider", func() (bool, string) {
		victim.requireRunning()
		n, _ := provider.state()
		return n >= nDB*perDB, fmt.Sprintf("%d of %d requests hanging", n, nDB*perDB)
	})
	victim.signal(syscall.SIGKILL)
	if err := victim.wait(10 * time.Second); err == nil {
		t.Fatal("the victim exited cleanly before the SIGKILL reached it")
	}
	killed := time.Now()
	expiry := map[string]time.Time{}
	for i, pool := range pools {
		e := leaseExpiries(t, pool, keys[i])
		if len(e) != perDB {
			t.Fatalf("tenant-%d: %d of its %d rows were in flight under the victim's lease when it died; the test needs all (a 5s timeout passed before the kill?)", i, len(e), perDB)
		}
		for k, at := range e {
			expiry[k] = at
		}
	}
	provider.mu.Lock()
	provider.hang = false
	provider.mu.Unlock()

	heir := startDaemon(t, "heir", "--config", cfgPath)
	testkit.WaitFor(t, 3*time.Minute, "every stranded row to succeed", func() (bool, string) {
		heir.requireRunning()
		done := 0
		for i, pool := range pools {
			for _, k := range keys[i] {
				if readRow(t, pool, k).Status == "succeeded" {
					done++
				}
			}
		}
		return done == nDB*perDB, fmt.Sprintf("%d of %d succeeded", done, nDB*perDB)
	})
	_, sent := provider.state()
	var longest, sinceKill time.Duration
	for k, at := range expiry {
		if len(sent[k]) != 2 {
			t.Fatalf("row %s was sent %d times; want twice (the lost attempt, then once more)", k, len(sent[k]))
		}
		handOver := sent[k][1].Sub(at)
		longest = max(longest, handOver)
		sinceKill = max(sinceKill, sent[k][1].Sub(killed))
		if handOver > handOverBound {
			t.Errorf("row %s was sent again %s after its lease expired; want within %s", k, handOver.Round(time.Millisecond), handOverBound)
		}
	}
	t.Logf("fleet hand-over after SIGKILL: %d databases, every stranded row sent again within %s of its lease expiry, %s after the kill (lease 11s)",
		nDB, longest.Round(time.Millisecond), sinceKill.Round(time.Millisecond))
}
