package config

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
	"github.com/drainer-io/drainer/outbox"
)

// Defaults applied by Load to fields the file leaves unset.
const (
	// DefaultWorkers is rows in flight per replica: providers answer in tens
	// of milliseconds, so throughput is workers ÷ latency (256 at 50 ms:
	// 5,000 rows/s per replica); per-adapter max_concurrency is the brake.
	// About 47 MiB per replica at 1,000 in flight (docs/benchmarks.md).
	DefaultWorkers = 256
	// DefaultMaxInFlightBytes bounds the payload bytes a replica holds in
	// flight: 32 MiB, so that 256 workers of payloads near the enqueue's
	// 1 MiB limit take about 35 of them at a time rather than all 256
	// (about 110 MiB of memory rather than 560; docs/operating.md).
	DefaultMaxInFlightBytes = ByteSize(32 << 20)
	DefaultLease            = 30 * time.Second
	DefaultUnroutedRecheck  = 15 * time.Second
	DefaultAdapterTimeout   = 10 * time.Second
	DefaultBreakerFailures  = 5
	DefaultBreakerOpenFor   = 30 * time.Second
	DefaultMaxAttempts      = 10
	DefaultBackoffBase      = 1 * time.Second
	DefaultBackoffCap       = 10 * time.Minute
	DefaultMaxRetryAfter    = 1 * time.Hour
	// DefaultCompensationWindow is a route's compensation_window.
	DefaultCompensationWindow = 7 * 24 * time.Hour
	// LeaseMargin is how much the lease must exceed every adapter timeout.
	LeaseMargin = 5 * time.Second
)

// Limits on values.
const (
	// MaxWorkers is the largest accepted workers value.
	MaxWorkers = 4096
	// MinInFlightBytes is the smallest accepted max_in_flight_bytes.
	MinInFlightBytes = ByteSize(64 << 10)
	// KeyTTLMargin is how long before key_ttl runs out a key_idempotent row
	// stops being sent; a key_ttl must exceed it.
	KeyTTLMargin = time.Minute
)

// Config is a loaded, expanded and validated configuration file.
type Config struct {
	// Path is the file the config was loaded from.
	Path string `yaml:"-"`

	// DatabaseURL is optional: the --database-url flag and DRAINER_DATABASE_URL win.
	DatabaseURL Secret `yaml:"database_url"`
	Workers     int    `yaml:"workers"`
	// MaxInFlightBytes bounds the payload bytes leased at once per replica
	// (per database, in a fleet); a row larger than it still goes out, one
	// at a time.
	MaxInFlightBytes ByteSize      `yaml:"max_in_flight_bytes"`
	Lease            time.Duration `yaml:"lease"`
	UnroutedRecheck  time.Duration `yaml:"unrouted_recheck"`
	Alerts           Alerts        `yaml:"alerts"`
	// Adapters by instance name.
	Adapters map[string]*Adapter `yaml:"adapters"`
	// Routes by tool_name.
	Routes map[string]*Route `yaml:"routes"`
	// Retention prunes terminal rows and old audit entries.
	Retention Retention `yaml:"retention"`
	// Console is the operator console (docs/reference.md §10).
	Console Console `yaml:"console"`
	// Gateway is the durable MCP gateway (docs/reference.md §13).
	Gateway Gateway `yaml:"gateway"`
	// Databases, when set, lists the databases one fleet drains; nil: the
	// one database of database_url (or --database-url).
	Databases *Databases `yaml:"databases"`

	// Warnings are non-fatal findings (e.g. an unset ${env:X} in check mode),
	// each rendered like an Error: FILE:LINE:COL: field.path: message.
	Warnings []string `yaml:"-"`

	databaseURL reference // database_url as written
}

// ResolveDatabaseURL expands database_url as written in the config file
// again, reading its ${env:…} and ${file:…} references anew, so that a
// rotated credentials file is picked up by the next connection. The error
// names the key and the reference, never a value.
func (c *Config) ResolveDatabaseURL() (Secret, error) {
	return c.databaseURL.resolve(c.DatabaseURL, "database_url")
}

// Retention defaults.
const (
	DefaultRetentionInterval = time.Minute
	DefaultRetentionBatch    = 500
	DefaultRetainSucceeded   = 7 * 24 * time.Hour
	DefaultRetainCancelled   = 7 * 24 * time.Hour
	DefaultRetainFailed      = 30 * 24 * time.Hour
	DefaultRetainCompensated = 30 * 24 * time.Hour
	DefaultRetainAudit       = 90 * 24 * time.Hour
	DefaultTombstoneMinimum  = 48 * time.Hour
)

// Retention says how long terminal rows and audit entries are kept. Parked
// rows (outcome_unknown, compensation_failed) and rows of a run whose saga
// is open are never pruned automatically.
type Retention struct {
	// Enabled defaults to true.
	Enabled   *bool         `yaml:"enabled"`
	Interval  time.Duration `yaml:"interval"`
	BatchSize int           `yaml:"batch_size"`
	// Per terminal status: rows last changed longer ago are pruned,
	// leaving a tombstone.
	Succeeded   time.Duration `yaml:"succeeded"`
	Failed      time.Duration `yaml:"failed"`
	Compensated time.Duration `yaml:"compensated"`
	Cancelled   time.Duration `yaml:"cancelled"`
	// Audit entries older than this are pruned (chains stay verifiable).
	Audit time.Duration `yaml:"audit"`
	// Tombstones are kept at least this long (default: the longest
	// adapter key_ttl plus 24h, at least 48h).
	Tombstones time.Duration `yaml:"tombstones"`
}

// IsEnabled reports whether pruning runs (default true).
func (r Retention) IsEnabled() bool { return r.Enabled == nil || *r.Enabled }

// Console configures the operator console served by `drainer run`
// (docs/reference.md §10). The --console-addr flag wins over Addr.
type Console struct {
	// Addr is the console's listen address; empty: no console.
	Addr string `yaml:"addr"`
	// Actions enables Requeue, Cancel, Resolve, Pause and Resume; the
	// console is read-only without it.
	Actions bool `yaml:"actions"`
	// Token opens actions (bearer token or session); required with actions,
	// from ${env:X} or ${file:/path} only.
	Token Secret `yaml:"token"`
}

// Gateway configures the durable MCP gateway served by `drainer run`
// (docs/reference.md §13). The --gateway-addr flag wins over Addr.
type Gateway struct {
	// Addr is the gateway's listen address; empty: no gateway.
	Addr string `yaml:"addr"`
	// Token, when set, is required of every request as a bearer token;
	// required off a loopback address; from ${env:X} or ${file:/path} only.
	Token Secret `yaml:"token"`
	// Wait bounds how long a call waits for its row to settle (default 30s).
	Wait time.Duration `yaml:"wait"`
	// AbortTool lists the tool drainer_abort_run.
	AbortTool bool `yaml:"abort_tool"`
}

// Alerts names adapters notified on events a human must act on.
type Alerts struct {
	// CompensationFailed is an adapter notified once per compensation_failed row.
	CompensationFailed string `yaml:"compensation_failed"`
}

// Adapter is one adapter instance: the envelope every type shares (type,
// timeout, breaker, rate_limit, max_concurrency, key_ttl), and the type's
// own keys in Settings, decoded into the adapter package's struct. The
// adapter types are registered in package dispatch (dispatch.RegisterKind);
// config imports no adapter package.
type Adapter struct {
	Name string `yaml:"-"`
	// Type is one of AdapterTypes().
	Type           string        `yaml:"type"`
	Timeout        time.Duration `yaml:"timeout"`
	Breaker        Breaker       `yaml:"breaker"`
	RateLimit      *RateLimit    `yaml:"rate_limit"`
	MaxConcurrency int           `yaml:"max_concurrency"`
	// KeyTTL is the provider's idempotency window; 0 means the type default.
	KeyTTL time.Duration `yaml:"key_ttl"`

	// Settings are the type's own keys (e.g. *webhook.Settings for http);
	// nil when the type is unknown.
	Settings dispatch.Settings `yaml:"-"`

	// File and Line locate the adapter's name in the config file, for errors
	// found after loading (see Errorf).
	File string `yaml:"-"`
	Line int    `yaml:"-"`
}

// Errorf returns a config error located at the adapter's name, for problems
// found after loading (e.g. while building the adapter). Its Field is
// adapters.NAME; %w wraps as in fmt.Errorf.
func (a *Adapter) Errorf(format string, args ...any) error {
	return newLocatedError(a.File, a.Line, "adapters."+a.Name, format, args...)
}

// Breaker configures an adapter's circuit breaker.
type Breaker struct {
	// ConsecutiveFailures opens the breaker; 0 disables it.
	ConsecutiveFailures *int          `yaml:"consecutive_failures"`
	OpenFor             time.Duration `yaml:"open_for"`
}

// Disabled reports whether the breaker is turned off.
func (b Breaker) Disabled() bool { return b.ConsecutiveFailures != nil && *b.ConsecutiveFailures == 0 }

// Failures returns the consecutive-failure threshold (the default when unset).
func (b Breaker) Failures() int {
	if b.ConsecutiveFailures == nil {
		return DefaultBreakerFailures
	}
	return *b.ConsecutiveFailures
}

// RateLimit is a token-bucket limit parsed from "N/s", "N/m" or "N/h".
type RateLimit struct {
	// PerSecond is the sustained rate.
	PerSecond float64
	// Burst is the bucket size (at least 1).
	Burst int
	// Text is the value as written, for messages.
	Text string
}

// IdempotencyKey places the idempotency key of an http request: header Name
// (the default, Idempotency-Key), query parameter Name, or top-level field
// Name of a JSON-object payload (wire.KeyPlacement, shared with the http
// adapter).
type IdempotencyKey = wire.KeyPlacement

// Key locations of IdempotencyKey.Location.
const (
	KeyLocationHeader = wire.LocationHeader
	KeyLocationQuery  = wire.LocationQuery
	KeyLocationBody   = wire.LocationBody
)

// Route is the policy of one tool_name.
type Route struct {
	ToolName     string  `yaml:"-"`
	Adapter      string  `yaml:"adapter"`
	Class        string  `yaml:"class"`
	MaxAttempts  int     `yaml:"max_attempts"`
	Backoff      Backoff `yaml:"backoff"`
	Compensation string  `yaml:"compensation"`
	// CompensationWindow is how long after a row succeeded its effect can
	// still be undone (the provider's reversal window): retention keeps
	// the row that long, or until its run's saga settled. Only with
	// Compensation; default DefaultCompensationWindow.
	CompensationWindow time.Duration `yaml:"compensation_window"`
	// ReclaimHold is an extra wait for a row whose replica died mid-call,
	// counted from its lease expiry: set it to the provider's longest
	// Retry-After to honour an answer no replica could record. Default 0:
	// a reclaimed row is held only by what drainer recorded (its own floor,
	// and the longest Retry-After its tool was answered recently).
	ReclaimHold time.Duration `yaml:"reclaim_hold"`
	// Critical defaults to true.
	Critical *bool  `yaml:"critical"`
	Fallback string `yaml:"fallback"`
	Ordering string `yaml:"ordering"`
	// Detect asks the provider whether an ambiguous attempt of a
	// non_idempotent route had its effect, instead of parking the row.
	Detect Detect `yaml:"detect"`
	// KeyTTL overrides the adapter's key_ttl for this tool; 0 means the
	// adapter's.
	KeyTTL time.Duration `yaml:"key_ttl"`
	// IdempotencyKey overrides the adapter's key placement for this tool
	// (http adapters only); nil means the adapter's.
	IdempotencyKey *IdempotencyKey `yaml:"idempotency_key"`
	// Method, Path, Query and Body shape the request of an http route:
	// POST (default), PUT, PATCH or DELETE; a path template appended to the
	// adapter's url ({tool_name}, {field} from the payload); fixed query
	// parameters; payload (default) or without_path_fields, the body
	// without the path's {field}s. The http adapter checks them
	// (dispatch.Kind.RouteKeys).
	Method string            `yaml:"method"`
	Path   string            `yaml:"path"`
	Query  map[string]string `yaml:"query"`
	Body   string            `yaml:"body"`

	// File and Line locate the route's tool_name in the config file.
	File string `yaml:"-"`
	Line int    `yaml:"-"`
}

// IsCritical reports the route's critical flag (default true).
func (r *Route) IsCritical() bool { return r.Critical == nil || *r.Critical }

// Errorf returns a config error located at the route's tool_name; its Field
// is routes.TOOL_NAME.
func (r *Route) Errorf(format string, args ...any) error {
	return newLocatedError(r.File, r.Line, "routes."+r.ToolName, format, args...)
}

// Detect is a probe: GET URL (with {key} and {tool_name} substituted,
// path-escaped). 2xx: the effect happened (the row succeeds with the probe's
// answer); 404 or 410: it did not (the row is retried with the same key),
// but only once the probe has proven itself (it answered 2xx for a key of
// the route known to have succeeded, within the last 15 minutes) and a
// second probe Settle later confirms the absence; anything else: the
// outcome stays unknown.
type Detect struct {
	URL     string            `yaml:"url"`
	Headers map[string]Secret `yaml:"headers"`
	Timeout time.Duration     `yaml:"timeout"`
	// Settle is waited before the first probe and between the two probes
	// that must both find no effect (default 1s): a provider may be slow to
	// show an effect.
	Settle time.Duration `yaml:"settle"`
}

// Enabled reports whether a probe is configured.
func (d Detect) Enabled() bool { return d.URL != "" }

// DefaultDetectTimeout bounds one probe.
const DefaultDetectTimeout = 5 * time.Second

// DefaultDetectSettle is the default Detect.Settle.
const DefaultDetectSettle = time.Second

// Backoff configures Full Jitter rescheduling.
type Backoff struct {
	Base time.Duration `yaml:"base"`
	Cap  time.Duration `yaml:"cap"`
	// MaxRetryAfter caps a provider's Retry-After. An explicit 0 is kept
	// (Retry-After is then ignored); only an unset value gets the default.
	MaxRetryAfter time.Duration `yaml:"max_retry_after"`
}

// RouteFor returns the route of a tool_name.
func (c *Config) RouteFor(tool string) (*Route, bool) {
	r, ok := c.Routes[tool]
	return r, ok
}

// LongestKeyTTL is the longest key_ttl the config gives any route, and
// where it comes from: an adapter's or a route's key_ttl, or, for an
// adapter that sets none, its type's default (dispatch.Kind.DefaultKeyTTL:
// 7d for kafka). Windows read from a provider at start are not known here;
// the engine's pruner keeps tombstones as long as those too
// (drainer/retention.go, keptTombstones).
func (c *Config) LongestKeyTTL() (time.Duration, string) {
	var longest time.Duration
	var where string
	for _, name := range c.AdapterNames() {
		a := c.Adapters[name]
		ttl, from := a.KeyTTL, "adapters."+name+".key_ttl"
		if k, ok := dispatch.KindOf(a.Type); ok && ttl == 0 {
			ttl, from = k.DefaultKeyTTL, "the "+a.Type+" default of adapters."+name
		}
		if ttl > longest {
			longest, where = ttl, from
		}
	}
	for _, tool := range slices.Sorted(maps.Keys(c.Routes)) {
		if ttl := c.Routes[tool].KeyTTL; ttl > longest {
			longest, where = ttl, "routes."+tool+".key_ttl"
		}
	}
	return longest, where
}

// AdapterNames returns the configured adapter names, sorted.
func (c *Config) AdapterNames() []string {
	return slices.Sorted(maps.Keys(c.Adapters))
}

// Summary describes the config in one line for a startup or reload log:
// adapters with their types, the route count, workers and lease. It holds
// no secret.
func (c *Config) Summary() string {
	parts := make([]string, 0, len(c.Adapters))
	for _, name := range c.AdapterNames() {
		parts = append(parts, name+" ("+c.Adapters[name].Type+")")
	}
	adapters := "none"
	if len(parts) > 0 {
		adapters = strings.Join(parts, ", ")
	}
	s := fmt.Sprintf("adapters: %s; routes: %d; workers: %d; lease: %s",
		adapters, len(c.Routes), c.Workers, formatDuration(c.Lease))
	if d := c.Databases; d != nil {
		s += fmt.Sprintf("; databases: %d static", len(d.Static))
		if d.Query != nil {
			s += " + catalog"
		}
		s += " (refresh " + formatDuration(d.Refresh) + ")"
	}
	return s
}

// applyDefaults fills the fields the file left unset. It runs after
// validation, which rejects explicit zeros wherever a default exists, so a
// zero here means unset; max_retry_after is the exception (0 is valid), so
// its presence is looked up in src.
func (c *Config) applyDefaults(src map[string]*source) {
	c.Workers = cmp.Or(c.Workers, DefaultWorkers)
	c.MaxInFlightBytes = cmp.Or(c.MaxInFlightBytes, DefaultMaxInFlightBytes)
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	c.UnroutedRecheck = cmp.Or(c.UnroutedRecheck, DefaultUnroutedRecheck)
	if c.Adapters == nil {
		c.Adapters = make(map[string]*Adapter)
	}
	if c.Routes == nil {
		c.Routes = make(map[string]*Route)
	}
	if c.Databases != nil {
		c.Databases.Refresh = cmp.Or(c.Databases.Refresh, DefaultDatabasesRefresh)
	}
	r := &c.Retention
	r.Interval = cmp.Or(r.Interval, DefaultRetentionInterval)
	r.BatchSize = cmp.Or(r.BatchSize, DefaultRetentionBatch)
	r.Succeeded = cmp.Or(r.Succeeded, DefaultRetainSucceeded)
	r.Failed = cmp.Or(r.Failed, DefaultRetainFailed)
	r.Compensated = cmp.Or(r.Compensated, DefaultRetainCompensated)
	r.Cancelled = cmp.Or(r.Cancelled, DefaultRetainCancelled)
	r.Audit = cmp.Or(r.Audit, DefaultRetainAudit)
	if r.Tombstones == 0 {
		// Longer than any provider's idempotency window, so a late
		// re-enqueue of a pruned row is never sent twice.
		longest, _ := c.LongestKeyTTL()
		r.Tombstones = max(longest+24*time.Hour, DefaultTombstoneMinimum)
	}
	for _, a := range c.Adapters {
		a.Timeout = cmp.Or(a.Timeout, DefaultAdapterTimeout)
		if a.Breaker.ConsecutiveFailures == nil {
			n := DefaultBreakerFailures
			a.Breaker.ConsecutiveFailures = &n
		}
		a.Breaker.OpenFor = cmp.Or(a.Breaker.OpenFor, DefaultBreakerOpenFor)
	}
	for name, r := range c.Routes {
		r.Class = cmp.Or(r.Class, outbox.ClassKeyIdempotent)
		r.Ordering = cmp.Or(r.Ordering, outbox.OrderingNone)
		r.MaxAttempts = cmp.Or(r.MaxAttempts, DefaultMaxAttempts)
		r.Backoff.Base = cmp.Or(r.Backoff.Base, DefaultBackoffBase)
		r.Backoff.Cap = cmp.Or(r.Backoff.Cap, DefaultBackoffCap)
		if src["routes."+name+".backoff.max_retry_after"] == nil {
			r.Backoff.MaxRetryAfter = DefaultMaxRetryAfter
		}
		if r.Compensation != "" {
			r.CompensationWindow = cmp.Or(r.CompensationWindow, DefaultCompensationWindow)
		}
		if r.Critical == nil {
			critical := true
			r.Critical = &critical
		}
		if r.Detect.Enabled() {
			r.Detect.Timeout = cmp.Or(r.Detect.Timeout, DefaultDetectTimeout)
			r.Detect.Settle = cmp.Or(r.Detect.Settle, DefaultDetectSettle)
		}
	}
}
