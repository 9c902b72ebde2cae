package daemon

import (
	"time"

	"github.com/drainer-io/drainer/compensations"
	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
)

// NewRouting turns a loaded config (its defaults applied by config.Load)
// and a built registry into the engine's routing: routes, adapter gate
// policies, retention and the compensation map. This is the one place that
// reads config on the engine's behalf; the engine itself knows no config.
func NewRouting(cfg *config.Config, reg *dispatch.Registry) *drainer.Routing {
	rt := &drainer.Routing{
		Routes:                  make(map[string]*drainer.Route, len(cfg.Routes)+1),
		Registry:                reg,
		UnroutedRecheck:         cfg.UnroutedRecheck,
		CompensationFailedAlert: cfg.Alerts.CompensationFailed,
		Policies:                gatePolicies(cfg),
		Retention:               retentionPolicy(cfg),
	}
	comp := make(map[string]string, len(cfg.Routes))
	for tool, r := range cfg.Routes {
		rt.Routes[tool] = newRoute(tool, r)
		if a := cfg.Adapters[r.Adapter]; a != nil && a.Type == mcpType {
			// The MCP gateway waits for these rows to settle.
			rt.Routes[tool].Announce = true
		}
		comp[tool] = r.Compensation
	}
	rt.Compensations = compensations.NewMap(comp)
	if a := cfg.Alerts.CompensationFailed; a != "" {
		// Each compensation_failed row queues one alert row, delivered like
		// any other: keyed, retried, bounded.
		rt.Routes[outbox.AlertTool] = &drainer.Route{
			Tool: outbox.AlertTool, Adapter: a, Class: outbox.ClassKeyIdempotent,
			MaxAttempts: config.DefaultMaxAttempts, Critical: true, Ordering: outbox.OrderingNone,
			Backoff: drainer.Backoff{Base: config.DefaultBackoffBase, Cap: config.DefaultBackoffCap, MaxRetryAfter: config.DefaultMaxRetryAfter},
		}
	}
	return rt
}

// mcpType is the adapter type whose routes announce their settled rows.
const mcpType = "mcp"

func newRoute(tool string, r *config.Route) *drainer.Route {
	route := &drainer.Route{
		Tool:         tool,
		Adapter:      r.Adapter,
		Class:        r.Class,
		MaxAttempts:  r.MaxAttempts,
		Compensation: r.Compensation,
		Critical:     r.IsCritical(),
		Fallback:     r.Fallback,
		Ordering:     r.Ordering,
		Backoff:      drainer.Backoff{Base: r.Backoff.Base, Cap: r.Backoff.Cap, MaxRetryAfter: r.Backoff.MaxRetryAfter},
		KeyTTL:       r.KeyTTL,
		ReclaimHold:  r.ReclaimHold,
	}
	if d := r.Detect; d.Enabled() {
		headers := make(map[string]string, len(d.Headers))
		for k, v := range d.Headers {
			headers[k] = v.Reveal()
		}
		route.Detect = drainer.NewDetector(drainer.DetectConfig{URL: d.URL, Headers: headers, Timeout: d.Timeout, Settle: d.Settle})
	}
	return route
}

// gatePolicies derives each adapter's breaker, rate limit and concurrency cap.
func gatePolicies(cfg *config.Config) map[string]drainer.GatePolicy {
	out := make(map[string]drainer.GatePolicy, len(cfg.Adapters))
	for name, a := range cfg.Adapters {
		p := drainer.GatePolicy{
			BreakerFailures: a.Breaker.Failures(),
			BreakerOpenFor:  a.Breaker.OpenFor,
			MaxConcurrency:  a.MaxConcurrency,
		}
		if a.RateLimit != nil {
			p.RatePerSecond, p.Burst = a.RateLimit.PerSecond, max(a.RateLimit.Burst, 1)
		}
		out[name] = p
	}
	return out
}

// retentionPolicy is the config's retention section for the engine.
func retentionPolicy(cfg *config.Config) drainer.RetentionPolicy {
	r := cfg.Retention
	return drainer.RetentionPolicy{
		Enabled:  r.IsEnabled(),
		Interval: r.Interval,
		Retention: store.Retention{
			BatchSize: r.BatchSize,
			ByStatus: map[outbox.Status]time.Duration{
				outbox.StatusSucceeded:   r.Succeeded,
				outbox.StatusFailed:      r.Failed,
				outbox.StatusCompensated: r.Compensated,
				outbox.StatusCancelled:   r.Cancelled,
			},
			Audit:       r.Audit,
			Tombstones:  r.Tombstones,
			Compensable: compensable(cfg),
		},
	}
}

// compensable maps each tool whose route names a compensation to its
// compensation_window.
func compensable(cfg *config.Config) map[string]time.Duration {
	out := map[string]time.Duration{}
	for tool, r := range cfg.Routes {
		if r.Compensation != "" {
			out[tool] = r.CompensationWindow
		}
	}
	return out
}
