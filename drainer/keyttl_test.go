package drainer

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// TestRouteKeyTTLOverridesAdapter: two rows first attempted 2h ago on the
// same adapter (key_ttl 24h). The route with a key_ttl of 90m fails its row
// without a call (the key may have expired upstream); the route that keeps
// the adapter's window sends its row.
func TestRouteKeyTTLOverridesAdapter(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var mu sync.Mutex
	var sent []string
	a := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		mu.Lock()
		sent = append(sent, m.Tuple.ToolName)
		mu.Unlock()
		return dispatch.Result{Outcome: dispatch.Success, Status: 200}
	})
	short := storetest.Insert(t, pool, storetest.Row{ToolName: "short", Attempts: 1, DueIn: -time.Second})
	long := storetest.Insert(t, pool, storetest.Row{ToolName: "long", Attempts: 1, DueIn: -time.Second})
	if _, err := pool.Exec(t.Context(), "UPDATE drainer.outbox SET first_attempt_at = now() - interval '2 hours'"); err != nil {
		t.Fatal(err)
	}
	rt := testRouting(t, map[string]dispatch.Adapter{"p": a},
		&Route{Tool: "short", Adapter: "p", KeyTTL: 90 * time.Minute},
		&Route{Tool: "long", Adapter: "p"})
	entry, _ := rt.Registry.Get("p")
	entry.KeyTTL = 24 * time.Hour
	startEngine(t, pool, rt, Config{Workers: 2})
	testkit.WaitFor(t, 10*time.Second, "both rows terminal", func() (bool, string) {
		return getRow(t, pool, short).Status == outbox.StatusFailed && getRow(t, pool, long).Status == outbox.StatusSucceeded, ""
	})
	r := getRow(t, pool, short)
	if r.LastError == nil || !strings.Contains(*r.LastError, "key TTL guard") || !strings.Contains(*r.LastError, "1h30m") {
		t.Fatalf("short row last_error = %v; want the key TTL guard naming the route's key_ttl", r.LastError)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 1 || sent[0] != "long" {
		t.Fatalf("sent %v; only the row within its route's window may be sent", sent)
	}
}

// TestProviderWindowBoundsRouteKeyTTL: a route's own key_ttl longer than
// the window its adapter's provider reported (a nats stream's duplicate
// window) does not outlive that window: a row first attempted 2h ago on a
// route of key_ttl 3h whose provider keeps keys 90m fails without a call,
// naming the window, where sending would repeat the effect.
func TestProviderWindowBoundsRouteKeyTTL(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var mu sync.Mutex
	var sent int
	a := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		mu.Lock()
		sent++
		mu.Unlock()
		return dispatch.Result{Outcome: dispatch.Success, Status: 200}
	})
	key := storetest.Insert(t, pool, storetest.Row{ToolName: "emit", Attempts: 1, DueIn: -time.Second})
	if _, err := pool.Exec(t.Context(), "UPDATE drainer.outbox SET first_attempt_at = now() - interval '2 hours'"); err != nil {
		t.Fatal(err)
	}
	rt := testRouting(t, map[string]dispatch.Adapter{"bus": a}, &Route{Tool: "emit", Adapter: "bus", KeyTTL: 3 * time.Hour})
	entry, _ := rt.Registry.Get("bus")
	entry.KeyTTL, entry.ProviderWindow = 90*time.Minute, 90*time.Minute
	startEngine(t, pool, rt, Config{Workers: 2})
	testkit.WaitFor(t, 10*time.Second, "the row failed", func() (bool, string) {
		return getRow(t, pool, key).Status == outbox.StatusFailed, string(getRow(t, pool, key).Status)
	})
	r := getRow(t, pool, key)
	if r.LastError == nil || !strings.Contains(*r.LastError, "key TTL guard") || !strings.Contains(*r.LastError, "1h30m") {
		t.Fatalf("last_error = %v; want the key TTL guard naming the provider's window", r.LastError)
	}
	mu.Lock()
	defer mu.Unlock()
	if sent != 0 {
		t.Fatalf("sent %d requests past the provider's window, want none", sent)
	}
}

// TestKeyWindowHoldsAtTheSend: the key TTL guard holds when the row is
// sent, not only when it is claimed. A row whose key window ends 2 s
// after it is recorded (attempted once, just now) is claimed within it
// and waits in its worker for the one slot of its adapter's
// max_concurrency, which another row holds until the window has passed.
// It must never be sent: it waits no longer than its window, and ends
// failed by the guard.
func TestKeyWindowHoldsAtTheSend(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	var mu sync.Mutex
	var sent []string
	a := dispatch.AdapterFunc(func(ctx context.Context, m *dispatch.Message) dispatch.Result {
		mu.Lock()
		sent = append(sent, m.Tuple.ToolName)
		mu.Unlock()
		if m.Tuple.ToolName == "hold" {
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return dispatch.Result{Outcome: dispatch.Success, Status: 200}
	})
	rt := testRouting(t, map[string]dispatch.Adapter{"p": a},
		&Route{Tool: "hold", Adapter: "p"},
		&Route{Tool: "late", Adapter: "p", KeyTTL: time.Minute + 2*time.Second})
	rt.Policies = map[string]GatePolicy{"p": {MaxConcurrency: 1}}
	entry, _ := rt.Registry.Get("p")
	entry.Timeout = time.Minute
	startEngine(t, pool, rt, Config{Workers: 4, Lease: 5 * time.Minute, GateWait: time.Minute})
	storetest.Insert(t, pool, storetest.Row{ToolName: "hold", DueIn: -time.Second})
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the holding row was not sent")
	}
	late := storetest.Insert(t, pool, storetest.Row{ToolName: "late", Attempts: 1, DueIn: -time.Second})
	if _, err := pool.Exec(t.Context(), "UPDATE drainer.outbox SET first_attempt_at = now() WHERE key = $1", late); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // the late row's window passes while the slot is held
	close(release)
	testkit.WaitFor(t, time.Minute, "the late row settled", func() (bool, string) {
		r := getRow(t, pool, late)
		return r.Status.Terminal(), string(r.Status)
	})
	if r := getRow(t, pool, late); r.Status != outbox.StatusFailed || r.LastError == nil || !strings.Contains(*r.LastError, "key TTL guard") {
		t.Fatalf("the late row is %s, last_error %v; want failed by the key TTL guard", r.Status, r.LastError)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, tool := range sent {
		if tool == "late" {
			t.Fatalf("sent %v: the late row was sent past its key window", sent)
		}
	}
}

// TestWindowWithinTheMarginIsNamed: a provider window not longer than the
// guard's 1m margin (a nats stream's 30s duplicate window) fails a row at
// its first claim, unsent, as the contract's rule has it; its last_error
// says that the window is the cause and names the adapter, not that a
// first attempt was "0s ago, beyond" it.
func TestWindowWithinTheMarginIsNamed(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var sent sync.Map
	a := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		sent.Store(m.Key, true)
		return dispatch.Result{Outcome: dispatch.Success, Status: 200}
	})
	key := enqueueN(t, pool, "run-w", "ev", 1)[0]
	rt := testRouting(t, map[string]dispatch.Adapter{"nats": a}, &Route{Tool: "ev", Adapter: "nats"})
	entry, _ := rt.Registry.Get("nats")
	entry.KeyTTL, entry.KeyTTLFromProvider, entry.ProviderWindow = 30*time.Second, true, 30*time.Second
	startEngine(t, pool, rt, Config{Workers: 1})
	testkit.WaitFor(t, 10*time.Second, "the row failed", func() (bool, string) {
		return getRow(t, pool, key).Status == outbox.StatusFailed, ""
	})
	r := getRow(t, pool, key)
	if r.LastError == nil || !strings.Contains(*r.LastError, "key_ttl 30s, adapter nats) is not longer than the guard's 1m margin") ||
		strings.Contains(*r.LastError, "ago") {
		t.Fatalf("last_error = %v; want the window named as the cause", r.LastError)
	}
	if _, ok := sent.Load(key); ok {
		t.Fatal("the row was sent")
	}
}
