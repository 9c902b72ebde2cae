//go:build integration

package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/producer"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// handOverBound is how long after its lease expired a row stranded by a
// SIGKILLed replica may wait before it is sent again, when nothing drainer
// knows holds it: the reclaimer's interval (2s), a claim round, and ample
// room for a loaded machine. The hold this replaced was max_retry_after
// (1h by default), so no scheduling delay passes for it.
const handOverBound = 45 * time.Second

// reclaimProvider hangs every request while hang is set (a replica killed
// then leaves its rows in flight), answers the tool "limited" 429
// Retry-After 120 on its first request, and records when each key was sent.
type reclaimProvider struct {
	mu      sync.Mutex
	hang    bool
	hanging int
	sent    map[string][]time.Time
	limited bool          // the first "limited" request was answered
	closed  chan struct{} // closed when the test ends: nothing hangs on
}

func (p *reclaimProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	p.mu.Lock()
	p.sent[key] = append(p.sent[key], time.Now())
	if strings.HasSuffix(r.URL.Path, "/limited") && !p.limited {
		p.limited = true
		p.mu.Unlock()
		w.Header().Set("Retry-After", "120")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	hang := p.hang
	if hang {
		p.hanging++
	}
	p.mu.Unlock()
	if hang {
		select { // until the replica dies (its connection closes)
		case <-r.Context().Done():
		case <-p.closed:
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"ok":true}`))
}

func (p *reclaimProvider) state() (hanging int, sent map[string][]time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sent = make(map[string][]time.Time, len(p.sent))
	for k, v := range p.sent {
		sent[k] = append([]time.Time(nil), v...)
	}
	return p.hanging, sent
}

// TestSIGKILLedReplicasRowsAreSentAgainWithinSeconds: a replica SIGKILLed
// with rows in flight, under the shipped defaults (max_retry_after 1h, no
// reclaim_hold), hands its rows over within seconds of their lease: each
// is sent again, with its key, within handOverBound of its lease expiry.
// Its rows of a tool the provider was rate-limiting (429 Retry-After 120 to
// another row, recorded when written) are held until lease expiry + 120s
// instead, and not sent meanwhile.
func TestSIGKILLedReplicasRowsAreSentAgainWithinSeconds(t *testing.T) {
	t.Parallel()
	dbURL, pool := newMigratedDB(t)
	ctx := context.Background()
	provider := &reclaimProvider{sent: map[string][]time.Time{}, closed: make(chan struct{})}
	srv := httptest.NewServer(provider)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(provider.closed) })
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
  limited:
    adapter: provider
    class: key_idempotent
`, srv.URL)
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", cfg)

	// The provider answers the first row of "limited" 429 Retry-After 120.
	probe := enqueueTools(t, pool, "probe", "limited", 1)[0]
	victim := startDaemon(t, "victim", "--config", cfgPath, "--database-url", dbURL)
	testkit.WaitFor(t, 2*time.Minute, "the 429 Retry-After 120 to be written and its mark recorded", func() (bool, string) {
		victim.requireRunning()
		var marks int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM drainer.retry_after_marks WHERE tool_name = 'limited' AND longest_ms = 120000`).Scan(&marks); err != nil {
			t.Fatal(err)
		}
		r := readRow(t, pool, probe)
		return marks == 1 && r.Status == "pending", fmt.Sprintf("marks %d, probe row %s", marks, r.Status)
	})

	provider.mu.Lock()
	provider.hang = true
	provider.mu.Unlock()
	charges := enqueueTools(t, pool, "run-charge", "charge", 4)
	limited := enqueueTools(t, pool, "run-limited", "limited", 4)
	testkit.WaitFor(t, 2*time.Minute, "the 8 new rows to be in flight at the provider", func() (bool, string) {
		victim.requireRunning()
		n, _ := provider.state()
		return n >= 8, fmt.Sprintf("%d requests hanging", n)
	})
	victim.signal(syscall.SIGKILL)
	if err := victim.wait(10 * time.Second); err == nil {
		t.Fatal("the victim exited cleanly before the SIGKILL reached it")
	}
	expiry := leaseExpiries(t, pool, append(append([]string(nil), charges...), limited...))
	if len(expiry) != 8 {
		t.Fatalf("%d of the 8 rows were in flight under the victim's lease when it died; the test needs all 8 (a 5s timeout passed before the kill?)", len(expiry))
	}
	provider.mu.Lock()
	provider.hang = false
	provider.mu.Unlock()

	heir := startDaemon(t, "heir", "--config", cfgPath, "--database-url", dbURL)
	testkit.WaitFor(t, 3*time.Minute, "the charge rows to succeed", func() (bool, string) {
		heir.requireRunning()
		done := 0
		for _, k := range charges {
			if readRow(t, pool, k).Status == "succeeded" {
				done++
			}
		}
		return done == len(charges), fmt.Sprintf("%d of %d succeeded", done, len(charges))
	})
	_, sent := provider.state()
	var longest time.Duration
	for _, k := range charges {
		if len(sent[k]) != 2 {
			t.Fatalf("charge row %s was sent %d times; want twice (the lost attempt, then once more)", k, len(sent[k]))
		}
		handOver := sent[k][1].Sub(expiry[k])
		longest = max(longest, handOver)
		if handOver > handOverBound {
			t.Errorf("charge row %s was sent again %s after its lease expired; want within %s", k, handOver.Round(time.Millisecond), handOverBound)
		}
	}
	t.Logf("hand-over after SIGKILL: every stranded row sent again within %s of its lease expiry (lease 11s)", longest.Round(time.Millisecond))

	// The rate-limited tool's reclaimed rows wait for the provider's 120s.
	// Their leases may expire a little after the charge rows' (the victim
	// may have claimed them in a later batch): each is read once reclaimed.
	testkit.WaitFor(t, time.Minute, "the rate-limited tool's rows to be reclaimed", func() (bool, string) {
		var leased int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM drainer.outbox WHERE key = ANY($1) AND status = 'in_flight'`, limited).Scan(&leased); err != nil {
			t.Fatal(err)
		}
		return leased == 0, fmt.Sprintf("%d still in flight", leased)
	})
	for _, k := range limited {
		var floorAfterExpiry float64
		var status string
		err := pool.QueryRow(ctx, `SELECT status, extract(epoch FROM not_before)::float8 FROM drainer.outbox WHERE key = $1`, k).Scan(&status, &floorAfterExpiry)
		if err != nil {
			t.Fatal(err)
		}
		held := time.Duration(floorAfterExpiry*float64(time.Second)) - time.Duration(expiry[k].UnixNano())
		if status != "pending" || held < 119*time.Second || held > 121*time.Second {
			t.Errorf("reclaimed row %s of the rate-limited tool: %s, floor %s after its lease expiry; want pending until expiry + 120s (the tool's recent Retry-After)", k, status, held)
		}
		if len(sent[k]) != 1 {
			t.Errorf("reclaimed row %s of the rate-limited tool was sent %d times; want once (held by the tool's Retry-After)", k, len(sent[k]))
		}
	}
}

// enqueueTools enqueues n intents of tool in run, one transaction, and
// returns their keys.
func enqueueTools(t *testing.T, pool *pgxpool.Pool, run, tool string, n int) []string {
	t.Helper()
	ins := make([]producer.Intent, n)
	for i := range ins {
		ins[i] = producer.Intent{
			Tuple:   idemkey.Tuple{AgentRunID: run, StepID: fmt.Sprintf("step-%d", i), ToolName: tool},
			Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)),
		}
	}
	var keys []string
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		res, err := producer.EnqueueBatchTx(context.Background(), tx, ins)
		for _, r := range res {
			keys = append(keys, r.Key)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// leaseExpiries returns, for each of keys still in flight, when its lease
// expires (database clock, which is this machine's).
func leaseExpiries(t *testing.T, pool *pgxpool.Pool, keys []string) map[string]time.Time {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT i.key, q.lease_expires_at FROM drainer.intents i JOIN drainer.queue q USING (seq)
		WHERE i.key = ANY($1) AND q.status = 'in_flight'`, keys)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	var key string
	var at time.Time
	if _, err := pgx.ForEachRow(rows, []any{&key, &at}, func() error { out[key] = at; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}
