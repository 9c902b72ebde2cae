package drainer

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/drainer-io/drainer/compensations"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
)

// Route is the resolved policy of one tool_name.
type Route struct {
	Tool         string
	Adapter      string
	Class        string
	MaxAttempts  int
	Backoff      Backoff
	Compensation string
	Critical     bool
	Fallback     string
	Ordering     string
	// KeyTTL overrides the adapter's key_ttl for this tool (0: the adapter's).
	KeyTTL time.Duration
	// ReclaimHold holds a reclaimed row this long past its lease expiry
	// (route reclaim_hold; see ReclaimPolicy).
	ReclaimHold time.Duration
	// Detect, on non_idempotent routes, asks the provider whether an
	// ambiguous attempt had its effect (nil: park as outcome_unknown).
	Detect *Detector
	// Announce: when a row of this route settles (terminal or parked), the
	// completion keeps its answer's record (dispatch.Result.Record) and
	// announces the row's key on the settle channel, in the same
	// transaction. The MCP gateway waits for its calls that way; routes to
	// MCP adapters announce.
	Announce bool
}

// NonIdempotent reports whether a retry of an ambiguous attempt could repeat
// the effect.
func (r *Route) NonIdempotent() bool { return r.Class == outbox.ClassNonIdempotent }

// Routing is one immutable generation of routes and adapters. A config reload
// swaps in a new Routing; attempts already under way finish on the old one.
type Routing struct {
	Routes          map[string]*Route
	Registry        *dispatch.Registry
	UnroutedRecheck time.Duration
	// CompensationFailedAlert names the adapter notified of compensation_failed rows.
	CompensationFailedAlert string
	// Compensations maps each tool to the tool that undoes it.
	Compensations compensations.Map
	// Policies protect each adapter (breaker, rate limit, concurrency).
	Policies map[string]GatePolicy
	// Retention prunes terminal rows, tombstones and audit entries.
	Retention RetentionPolicy
	// Release, with SharedAdapters, runs once the engine no longer uses
	// this routing: a Reload replaced it and its last claim and attempt
	// ended, or Stop returned. The owner of the shared adapters counts so
	// when its engines are done with them (nil: nothing to tell).
	Release func()

	// Derived by the engine when it adopts the routing (attachGates), since the
	// claim reads them every time.
	gates map[string]*gate
	// durableClaims: some route is non_idempotent, so claims wait for disk.
	durableClaims bool
	orderedTools  []string
	// routedTools: the claim counts the attempts of these tools' rows only
	// (store.Claim.Routed).
	routedTools []string

	// users counts the claims and attempts using this routing; once it is
	// retired (a reload swapped in another) and unused, onIdle runs (it
	// closes the adapters the new routing does not share).
	mu      sync.Mutex
	users   int
	retired bool
	onIdle  func()
}

// use records one more user; it reports false once the routing is retired.
func (rt *Routing) use() bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.retired {
		return false
	}
	rt.users++
	return true
}

// share records one more user on behalf of a caller that already holds a
// use (a claim handing its rows to workers), retired or not.
func (rt *Routing) share() {
	rt.mu.Lock()
	rt.users++
	rt.mu.Unlock()
}

// done ends one use.
func (rt *Routing) done() {
	rt.mu.Lock()
	rt.users--
	idle := rt.retired && rt.users == 0
	fn := rt.onIdle
	rt.mu.Unlock()
	if idle && fn != nil {
		fn()
	}
}

// retire marks the routing replaced; onIdle runs once nothing uses it.
func (rt *Routing) retire(onIdle func()) {
	rt.mu.Lock()
	rt.retired, rt.onIdle = true, onIdle
	idle := rt.users == 0
	rt.mu.Unlock()
	if idle && onIdle != nil {
		onIdle()
	}
}

// RoutedTools lists the tools that have a route, sorted.
func (rt *Routing) RoutedTools() []string {
	return slices.Sorted(maps.Keys(rt.Routes))
}

// OrderedTools lists the tools whose rows dispatch one at a time per scope.
func (rt *Routing) OrderedTools() []string {
	var tools []string
	for tool, r := range rt.Routes {
		if r.Ordering == outbox.OrderingBusinessScope {
			tools = append(tools, tool)
		}
	}
	return tools
}

// NonIdempotentTools lists the tools whose rows park as outcome_unknown when
// a lease expires mid-call.
func (rt *Routing) NonIdempotentTools() []string {
	var tools []string
	for tool, r := range rt.Routes {
		if r.NonIdempotent() {
			tools = append(tools, tool)
		}
	}
	return tools
}

// ReclaimPolicy is how the rows of expired leases are taken back: parked on
// non_idempotent routes, else sent again once the lease has expired, held
// only by what drainer knows (docs/reference.md, "Reclaim"): the row's own
// not_before floor, its route's reclaim_hold, and the longest Retry-After
// its tool was answered within the route's last max_retry_after (recorded
// by the completions: store.RetryAfterMark). A tool without a route
// (removed since the claim) is looked up over the longest max_retry_after
// of any route, or the default when there is none.
func (rt *Routing) ReclaimPolicy() store.ReclaimPolicy {
	p := store.ReclaimPolicy{
		NonIdempotent: rt.NonIdempotentTools(),
		Hold:          make(map[string]time.Duration, len(rt.Routes)),
		Window:        make(map[string]time.Duration, len(rt.Routes)),
	}
	for tool, r := range rt.Routes {
		p.Hold[tool] = r.ReclaimHold
		p.Window[tool] = r.Backoff.MaxRetryAfter
		p.OtherWindow = max(p.OtherWindow, r.Backoff.MaxRetryAfter)
	}
	if len(rt.Routes) == 0 {
		p.OtherWindow = defaultRetryAfterWindow
	}
	return p
}

// defaultRetryAfterWindow is how far back a reclaim looks for Retry-After
// answers of a tool that no route names, when no route exists at all: the
// default max_retry_after.
const defaultRetryAfterWindow = time.Hour
