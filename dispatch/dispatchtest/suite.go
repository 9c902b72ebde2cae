package dispatchtest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
)

// Time bounds of the checks. They are generous on purpose: they catch an
// adapter that ignores its context, not a slow machine.
const (
	hangDeadline    = 300 * time.Millisecond // the context deadline of the hang check
	hangReturnBound = 5 * time.Second        // how soon after dispatch a hung attempt must return
	promptBound     = 2 * time.Second        // how soon a cancelled attempt must return
	concurrency     = 32                     // distinct keys dispatched at once
	attemptTimeout  = 30 * time.Second       // bounds every other attempt
)

// Run runs every conformance check as subtests of t; each builds its own
// adapter and upstream with f and closes the adapter when it ends.
func Run(t *testing.T, f Factory) {
	t.Helper()
	checks := []struct {
		name string
		fn   func(t *testing.T, f Factory)
	}{
		{"success", checkSuccess},
		{"replay", checkReplay},
		{"same key across retries", checkRetries},
		{"terminal", checkTerminal},
		{"hang", checkHang},
		{"cancelled context", checkCancelled},
		{"concurrent", checkConcurrent},
		{"redacted errors", checkRedacted},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) { c.fn(t, f) })
	}
}

// dispatchOnce makes one attempt bounded by attemptTimeout and checks the
// invariants every result must hold.
func dispatchOnce(t *testing.T, a dispatch.Adapter, m *dispatch.Message, secret string) dispatch.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), attemptTimeout)
	defer cancel()
	r := a.Dispatch(ctx, m)
	checkResult(t, r, secret)
	return r
}

// checkResult checks what every result must hold, whatever its outcome: a
// valid outcome, an error exactly when it is not a success, no payload and
// no secret in that error, a non-negative RetryAfter, and a stored response
// that is JSON.
func checkResult(t *testing.T, r dispatch.Result, secret string) {
	t.Helper()
	switch r.Outcome {
	case dispatch.Success, dispatch.Replay:
		if r.Err != nil {
			t.Errorf("%s with a non-nil Err: %v", r.Outcome, r.Err)
		}
		if r.Response != nil && !json.Valid(r.Response) {
			t.Errorf("%s with a Response that is not JSON: %q", r.Outcome, r.Response)
		}
	case dispatch.Retry, dispatch.Terminal, dispatch.Ambiguous, dispatch.Auth:
		if r.Err == nil {
			t.Errorf("%s (reason %q) with a nil Err", r.Outcome, r.Reason)
		}
	default:
		t.Errorf("invalid Outcome %d (reason %q, err %v)", r.Outcome, r.Reason, r.Err)
	}
	if r.RetryAfter < 0 {
		t.Errorf("negative RetryAfter %v", r.RetryAfter)
	}
	if r.Err == nil {
		return
	}
	for _, text := range []string{r.Err.Error(), fmt.Sprintf("%+v", r.Err)} {
		if strings.Contains(text, marker) {
			t.Errorf("Err reveals the payload: %s", text)
		}
		if secret != "" && strings.Contains(text, secret) {
			t.Errorf("Err reveals the configured secret: %s", text)
		}
	}
}

func wantOutcome(t *testing.T, what string, r dispatch.Result, want ...dispatch.Outcome) {
	t.Helper()
	for _, w := range want {
		if r.Outcome == w {
			return
		}
	}
	t.Errorf("%s: got %s (reason %q, err %v), want %v", what, r.Outcome, r.Reason, r.Err, want)
}

func wantEffects(t *testing.T, up Upstream, key string, want int) {
	t.Helper()
	if got := up.Effects(t, key); got != want {
		t.Errorf("upstream holds %d effects for the key, want %d", got, want)
	}
}

func inject(t *testing.T, up Upstream, f Fault, n int) {
	t.Helper()
	if !up.Inject(f, n) {
		t.Skipf("the upstream cannot produce a %s fault; check skipped", f)
	}
}

func checkSuccess(t *testing.T, f Factory) {
	a, up, secret := setup(t, f)
	m := NewMessage(Tool, payload)
	r := dispatchOnce(t, a, m, secret)
	wantOutcome(t, "first dispatch", r, dispatch.Success)
	wantEffects(t, up, m.Key, 1)
}

func checkReplay(t *testing.T, f Factory) {
	a, up, secret := setup(t, f)
	m := NewMessage(Tool, payload)
	wantOutcome(t, "first dispatch", dispatchOnce(t, a, m, secret), dispatch.Success)
	r := dispatchOnce(t, a, attempt(m, 2), secret)
	wantOutcome(t, "the same message again", r, dispatch.Replay)
	wantEffects(t, up, m.Key, 1)
}

// checkRetries: two transient failures, then the effect, all with one key.
func checkRetries(t *testing.T, f Factory) {
	a, up, secret := setup(t, f)
	inject(t, up, FaultTransient, 2)
	m := NewMessage(Tool, payload)
	for n := 1; n <= 2; n++ {
		r := dispatchOnce(t, a, attempt(m, n), secret)
		wantOutcome(t, fmt.Sprintf("attempt %d (transient fault)", n), r, dispatch.Retry)
	}
	r := dispatchOnce(t, a, attempt(m, 3), secret)
	wantOutcome(t, "attempt 3", r, dispatch.Success, dispatch.Replay)
	wantEffects(t, up, m.Key, 1)
}

func checkTerminal(t *testing.T, f Factory) {
	a, up, secret := setup(t, f)
	inject(t, up, FaultTerminal, 1)
	m := NewMessage(Tool, payload)
	r := dispatchOnce(t, a, m, secret)
	wantOutcome(t, "terminal fault", r, dispatch.Terminal)
	wantEffects(t, up, m.Key, 0)
}

// checkHang: a provider that never answers must not hold the attempt past
// its context, and must not be reported as a success.
func checkHang(t *testing.T, f Factory) {
	a, up, secret := setup(t, f)
	inject(t, up, FaultHang, 1)
	m := NewMessage(Tool, payload)
	ctx, cancel := context.WithTimeout(t.Context(), hangDeadline)
	defer cancel()
	start := time.Now()
	r := a.Dispatch(ctx, m)
	elapsed := time.Since(start)
	checkResult(t, r, secret)
	if elapsed > hangReturnBound {
		t.Errorf("a hung attempt with a %v deadline returned after %v", hangDeadline, elapsed.Round(time.Millisecond))
	}
	switch {
	case r.Outcome == dispatch.Ambiguous:
	case r.Outcome == dispatch.Retry && (r.NotSent || r.Refused):
	default:
		t.Errorf("hung attempt: got %s (NotSent %v, Refused %v, reason %q, err %v), want ambiguous, or retry with NotSent or Refused (the provider confirmed it did nothing)",
			r.Outcome, r.NotSent, r.Refused, r.Reason, r.Err)
	}
}

// checkCancelled: a context cancelled before the call (shutdown) is noticed
// before anything reaches the provider.
func checkCancelled(t *testing.T, f Factory) {
	a, up, secret := setup(t, f)
	m := NewMessage(Tool, payload)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	r := a.Dispatch(ctx, m)
	elapsed := time.Since(start)
	checkResult(t, r, secret)
	if elapsed > promptBound {
		t.Errorf("an attempt with a cancelled context returned after %v", elapsed.Round(time.Millisecond))
	}
	if r.Succeeded() {
		t.Errorf("an attempt with a cancelled context reported %s", r.Outcome)
	}
	wantEffects(t, up, m.Key, 0)
}

// checkConcurrent dispatches distinct keys at once; run with -race.
func checkConcurrent(t *testing.T, f Factory) {
	a, up, secret := setup(t, f)
	msgs := make([]*dispatch.Message, concurrency)
	results := make([]dispatch.Result, concurrency)
	for i := range msgs {
		msgs[i] = NewMessage(Tool, payload)
	}
	ctx, cancel := context.WithTimeout(t.Context(), attemptTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, m := range msgs {
		wg.Go(func() { results[i] = a.Dispatch(ctx, m) })
	}
	wg.Wait()
	for i, r := range results {
		checkResult(t, r, secret)
		wantOutcome(t, fmt.Sprintf("concurrent dispatch %d", i), r, dispatch.Success)
		wantEffects(t, up, msgs[i].Key, 1)
	}
}

// checkRedacted provokes every failure the upstream can produce, plus the
// same key with another payload, and checks (in checkResult) that no error
// reveals the payload or the secret. It asserts no outcome of its own: the
// other checks do.
func checkRedacted(t *testing.T, f Factory) {
	a, up, secret := setup(t, f)
	produced := 0
	for _, fault := range []Fault{FaultTransient, FaultTerminal, FaultHang} {
		if !up.Inject(fault, 1) {
			t.Logf("the upstream cannot produce a %s fault; not checked here", fault)
			continue
		}
		produced++
		timeout := attemptTimeout
		if fault == FaultHang {
			timeout = hangDeadline
		}
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		checkResult(t, a.Dispatch(ctx, NewMessage(Tool, payload)), secret)
		cancel()
	}
	m := NewMessage(Tool, payload)
	wantOutcome(t, "first dispatch", dispatchOnce(t, a, m, secret), dispatch.Success)
	other := attempt(m, 2)
	other.Payload = json.RawMessage(`{"amount":99,"currency":"usd","description":"` + marker + `-other"}`)
	dispatchOnce(t, a, other, secret) // a mismatch for most providers; must not quote either payload
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	checkResult(t, a.Dispatch(ctx, NewMessage(Tool, payload)), secret)
	if produced == 0 {
		t.Log("no fault could be injected: only the mismatch and the cancelled attempt were checked")
	}
}
