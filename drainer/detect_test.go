package drainer

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// effectProvider is a non-idempotent provider double with a probe endpoint.
// The first call of a row whose step starts with "had" applies the effect
// and then times out; the first call of other rows times out before any
// effect; a row whose step is "warm" succeeds at once. An effect shows on the
// probe lag after it was applied.
type effectProvider struct {
	lag time.Duration

	mu      sync.Mutex
	applied map[string]time.Time
	calls   map[string]int
	probes  int
	probed  map[string]int
}

func newEffectProvider(lag time.Duration) *effectProvider {
	return &effectProvider{lag: lag, applied: map[string]time.Time{}, calls: map[string]int{}, probed: map[string]int{}}
}

func (p *effectProvider) Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result {
	p.mu.Lock()
	p.calls[m.Key]++
	if p.calls[m.Key] == 1 && strings.HasPrefix(m.Tuple.StepID, "hang") {
		// The effect applied, then no answer until the attempt's deadline:
		// an adapter whose timeout fired.
		p.applied[m.Key] = time.Now()
		p.mu.Unlock()
		<-ctx.Done()
		return dispatch.Result{Outcome: dispatch.Ambiguous, Reason: "timeout", Err: errors.New("timeout")}
	}
	defer p.mu.Unlock()
	if p.calls[m.Key] == 1 && m.Tuple.StepID != "warm" {
		if strings.HasPrefix(m.Tuple.StepID, "had") {
			p.applied[m.Key] = time.Now()
		}
		return dispatch.Result{Outcome: dispatch.Ambiguous, Reason: "timeout", Err: errors.New("timeout")}
	}
	p.applied[m.Key] = time.Now()
	return dispatch.Result{Outcome: dispatch.Success}
}

func (p *effectProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	p.mu.Lock()
	at, ok := p.applied[key]
	p.probes++
	p.probed[key]++
	p.mu.Unlock()
	if strings.HasPrefix(r.URL.Path, "/effects/") && ok && time.Since(at) >= p.lag {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"found":"` + key + `"}`))
		return
	}
	http.NotFound(w, r)
}

func (p *effectProvider) probesOf(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.probed[key]
}

func (p *effectProvider) callsOf(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[key]
}

// detectEnv runs an engine with route "wire" probed at path (on the
// provider's server) and route "wire_blind" without probe; a first row of
// "wire" succeeds before it returns, so a probe aimed right can prove itself.
func detectEnv(t *testing.T, p *effectProvider, path string, settle time.Duration) func(step, tool string) string {
	t.Helper()
	pool := newPool(t)
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	wire := &Route{Tool: "wire", Class: "non_idempotent", Detect: NewDetector(DetectConfig{URL: srv.URL + path, Timeout: 5 * time.Second, Settle: settle})}
	blind := &Route{Tool: "wire_blind", Adapter: "wire", Class: "non_idempotent"}
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"wire": p}, wire, blind), Config{Workers: 4})
	enqueue := func(step, tool string) string {
		var key string
		if err := pool.QueryRow(t.Context(), "SELECT key FROM drainer.enqueue('run-'||$1, $1, $2, '', '{}')", step, tool).Scan(&key); err != nil {
			t.Fatal(err)
		}
		return key
	}
	warm := enqueue("warm", "wire")
	testkit.WaitFor(t, 30*time.Second, "first row succeeded", func() (bool, string) { return getRow(t, pool, warm).Status == outbox.StatusSucceeded, "" })
	return func(step, tool string) string {
		k := enqueue(step, tool)
		testkit.WaitFor(t, 30*time.Second, step+" settled", func() (bool, string) {
			s := getRow(t, pool, k).Status
			return s == outbox.StatusSucceeded || s == outbox.StatusOutcomeUnknown || s == outbox.StatusFailed, ""
		})
		if r := getRow(t, pool, k); r.LastError != nil {
			t.Logf("%s: %s: %s", step, r.Status, *r.LastError)
		}
		return k
	}
}

// TestDetectProbe: on a non_idempotent route an ambiguous attempt is not
// parked when a trusted probe can tell: an existing effect makes the row
// succeed (no second call); a confirmed absence makes it retry with the same
// key. Without a probe the row is parked as outcome_unknown.
func TestDetectProbe(t *testing.T) {
	t.Parallel()
	p := newEffectProvider(0)
	settle := detectEnv(t, p, "/effects/{key}", 50*time.Millisecond)
	had := settle("had_effect", "wire")
	no := settle("no_effect", "wire")
	park := settle("had_blind", "wire_blind")
	if n := p.callsOf(had); n != 1 {
		t.Fatalf("row whose effect the probe found was called %d times, want 1", n)
	}
	if n := p.callsOf(no); n != 2 {
		t.Fatalf("row without effect: %d calls; want a retry after the confirmed absence ", n)
	}
	if n := p.callsOf(park); n != 1 {
		t.Fatalf("row on a route without probe retried blindly: %d calls", n)
	}
}

// TestDetectProbeAfterATimeout: an attempt that used its whole time (the
// adapter's timeout fired) is probed within what is left of the lease, not
// of the attempt: its effect found, the row succeeds without a second call.
func TestDetectProbeAfterATimeout(t *testing.T) {
	t.Parallel()
	p := newEffectProvider(0)
	settle := detectEnv(t, p, "/effects/{key}", 50*time.Millisecond)
	had := settle("hang_had_effect", "wire")
	if n := p.callsOf(had); n != 1 {
		t.Fatalf("a timed-out row whose effect exists was called %d times, want 1", n)
	}
	if p.probesOf(had) == 0 {
		t.Fatal("no detect probe was sent after the timed-out attempt: the row was parked unprobed")
	}
}

// TestDetectProbeMustProveItself: a probe aimed at the wrong place answers
// 404 for every key, including keys known to have succeeded. Its 404s are
// not believed: the ambiguous row parks as outcome_unknown and is never sent
// again.
func TestDetectProbeMustProveItself(t *testing.T) {
	t.Parallel()
	p := newEffectProvider(0)
	settle := detectEnv(t, p, "/wrong/{key}", 50*time.Millisecond)
	had := settle("had_effect", "wire")
	if n := p.callsOf(had); n != 1 {
		t.Fatalf("an untrusted probe's 404 sent the row again: %d calls", n)
	}
}

// TestDetectProbeWaitsForSlowEffects: a provider that shows an effect only a
// while after applying it is probed twice, settle apart, before an absence
// counts: the row succeeds on the second probe instead of being sent again.
func TestDetectProbeWaitsForSlowEffects(t *testing.T) {
	t.Parallel()
	p := newEffectProvider(300 * time.Millisecond)
	settle := detectEnv(t, p, "/effects/{key}", 200*time.Millisecond)
	had := settle("had_effect", "wire")
	if n := p.callsOf(had); n != 1 {
		t.Fatalf("a slow-to-show effect was duplicated: %d calls", n)
	}
}
