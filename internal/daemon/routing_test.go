package daemon

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
)

// TestNewRouting: the engine's routing carries what the config says, with
// the defaults config.Load applied, plus the alert route when an alert
// adapter is named.
func TestNewRouting(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "drainer.yaml")
	if err := os.WriteFile(path, []byte(`
alerts: {compensation_failed: pager}
adapters:
  pay: {type: http, url: "http://pay.internal/{tool_name}", key_ttl: 48h, rate_limit: 10/s, breaker: {consecutive_failures: 3}}
  pager: {type: http, url: "http://pager.internal/{tool_name}"}
routes:
  charge: {adapter: pay, compensation: refund, backoff: {base: 2s}}
  refund: {adapter: pay, max_attempts: 3}
  wire:
    adapter: pay
    class: non_idempotent
    detect: {url: "http://pay.internal/by-key/{key}"}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rt := NewRouting(cfg, &dispatch.Registry{})
	charge := rt.Routes["charge"]
	if charge.Class != outbox.ClassKeyIdempotent || charge.MaxAttempts != config.DefaultMaxAttempts ||
		charge.Backoff.Base != 2*time.Second || charge.Backoff.Cap != config.DefaultBackoffCap ||
		charge.Backoff.MaxRetryAfter != config.DefaultMaxRetryAfter || !charge.Critical || charge.Compensation != "refund" {
		t.Fatalf("charge route %+v", charge)
	}
	if rt.Routes["refund"].MaxAttempts != 3 {
		t.Fatalf("refund route %+v", rt.Routes["refund"])
	}
	if rt.Routes["wire"].Detect == nil || rt.Routes["charge"].Detect != nil {
		t.Fatal("only the route with a detect section gets a probe")
	}
	if a := rt.Routes[outbox.AlertTool]; a == nil || a.Adapter != "pager" {
		t.Fatalf("alert route %+v", a)
	}
	if p := rt.Policies["pay"]; p.BreakerFailures != 3 || p.RatePerSecond != 10 {
		t.Fatalf("gate policy of pay %+v", p)
	}
	if got := rt.Retention.Tombstones; got < 72*time.Hour {
		t.Fatalf("tombstones kept %s; want at least the longest key_ttl (48h) plus a day", got)
	}
	if len(rt.Compensations.Tools) != 1 || rt.Compensations.Comps[0] != "refund" {
		t.Fatalf("compensations %+v", rt.Compensations)
	}
}
