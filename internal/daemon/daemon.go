package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/builtin"
	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/gateway"
	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options configure Run. Flags and environment have already been merged.
type Options struct {
	ConfigPath string
	// Config, when set, is used instead of loading ConfigPath (demo).
	Config *config.Config
	// DatabaseURL wins over the config file's database_url.
	DatabaseURL string
	Schema      string
	// Workers wins over the config file when > 0.
	Workers     int
	MetricsAddr string
	// ConsoleAddr wins over the config's console.addr; empty: no console
	// unless the config names one.
	ConsoleAddr string
	// ConsoleSampleEvery is how often the console samples the backlog
	// (zero: its default).
	ConsoleSampleEvery time.Duration
	// GatewayAddr wins over the config's gateway.addr; empty: no gateway
	// unless the config names one.
	GatewayAddr string
	// GatewayListener, when set, serves the gateway instead of taking its
	// address (an in-process caller that needs the address first: the
	// demo, tests). The daemon closes it.
	GatewayListener net.Listener
	ShutdownTimeout time.Duration
	Logger          *slog.Logger
	Version         string
	// Reload receives a value per SIGHUP.
	Reload <-chan struct{}
	// Started, when set, is called once the engine runs.
	Started func(*drainer.Engine)
	// Engine tunes the engine (zero: defaults).
	Engine drainer.Config
	// Registry, when set, receives the daemon's metrics instead of a fresh
	// registry, so an in-process caller (the demo) can read its counters.
	Registry *prometheus.Registry
}

// ConfigError is a configuration problem: the CLI exits 2.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Run runs the daemon until ctx is cancelled, then shuts down in order.
func Run(ctx context.Context, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	st, err := resolve(opts, log)
	if err != nil {
		return err
	}
	if st.cfg.Databases != nil {
		if opts.GatewayAddr != "" {
			return &ConfigError{errors.New("--gateway-addr: the gateway records calls in one database; it cannot serve a fleet (databases:)")}
		}
		return runFleet(ctx, st, opts, log)
	}
	d := &daemonRun{opts: opts, st: st, log: log}
	defer d.cleanup()
	eng, err := d.start(ctx)
	if err != nil {
		if ctx.Err() != nil && !isConfigError(err) {
			// Stopped while starting (waiting for the database, say):
			// nothing was claimed, so nothing is left in flight.
			log.Info("stopped before the engine started; no row was claimed", "err", err)
			return nil
		}
		return err
	}
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-opts.Reload:
			reload(ctx, eng, d.gateway, d.st.cfg.Gateway, opts, log)
		}
	}
	d.ready.notReady("stopping")
	if d.stopGateway != nil {
		// Calls waiting for their rows are answered now (recorded, not
		// finished: their retries get the outcome), before the engine stops.
		d.stopGateway()
	}
	sctx, cancel := context.WithTimeout(context.Background(), cmp.Or(opts.ShutdownTimeout, 30*time.Second))
	defer cancel()
	return eng.Stop(sctx)
}

// settings are what Run runs with once flags, environment, config file and
// defaults are merged (in that order of precedence).
type settings struct {
	cfg   *config.Config
	dbURL string
	// reread reads database_url again (nil: the url came from the flag
	// or the environment, fixed for the process's life).
	reread  func() (config.Secret, error)
	schema  string
	workers int
	lease   time.Duration
	// maxInFlightBytes is the config's max_in_flight_bytes.
	maxInFlightBytes int64
}

// resolve loads the config and merges it with the options.
func resolve(opts Options, log *slog.Logger) (settings, error) {
	cfg := opts.Config
	if cfg == nil {
		var err error
		if cfg, err = config.Load(opts.ConfigPath, config.LoadOptions{}); err != nil {
			return settings{}, &ConfigError{err}
		}
	}
	for _, w := range cfg.Warnings {
		log.Warn("config warning", "warning", w)
	}
	st := settings{
		cfg:              cfg,
		dbURL:            cmp.Or(opts.DatabaseURL, cfg.DatabaseURL.Reveal()),
		schema:           cmp.Or(opts.Schema, migrations.DefaultSchema),
		workers:          cmp.Or(opts.Workers, cfg.Workers, config.DefaultWorkers),
		lease:            cmp.Or(cfg.Lease, config.DefaultLease),
		maxInFlightBytes: int64(cmp.Or(cfg.MaxInFlightBytes, config.DefaultMaxInFlightBytes)),
	}
	if opts.DatabaseURL == "" && cfg.DatabaseURL != "" {
		st.reread = cfg.ResolveDatabaseURL
	}
	if st.dbURL == "" && cfg.Databases == nil {
		return settings{}, &ConfigError{errors.New("no database URL: set --database-url, DRAINER_DATABASE_URL or database_url in the config file")}
	}
	if err := migrations.ValidateSchema(st.schema); err != nil {
		return settings{}, &ConfigError{err}
	}
	return st, nil
}

// daemonRun holds what one Run started, to be released in reverse order.
type daemonRun struct {
	opts        Options
	st          settings
	log         *slog.Logger
	ready       readiness
	pool        atomic.Pointer[pgxpool.Pool]
	engine      atomic.Pointer[drainer.Engine] // for /readyz, once started
	closers     []func()
	stopGateway func()           // stops the MCP gateway (nil: none); idempotent
	gateway     *gateway.Gateway // the MCP gateway served (nil: none)
	// gatewayMetrics are registered at the start, gateway or not.
	gatewayMetrics *gateway.Metrics
}

// onCleanup registers f to run at cleanup, after those registered later.
func (d *daemonRun) onCleanup(f func()) { d.closers = append(d.closers, f) }

// cleanup releases what start acquired, last first.
func (d *daemonRun) cleanup() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// start builds adapters, serves health and metrics, connects, waits for
// the schema and starts the engine. On error, what it built is released by
// cleanup, except adapters handed to a running engine (the engine owns them).
func (d *daemonRun) start(ctx context.Context) (*drainer.Engine, error) {
	st, log := d.st, d.log
	reg := d.opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	// Health and metrics first, so /readyz answers "not ready" while a
	// provider or the database is unreachable.
	metrics, addr, err := d.serveMetrics(reg)
	if err != nil {
		return nil, err
	}

	// The console's address is taken before anything slow, so a taken one
	// is refused at once.
	consoleLn, err := d.listenConsole()
	if err != nil {
		return nil, err
	}
	gatewayLn, err := d.listenGateway()
	if err != nil {
		return nil, err
	}

	registry, err := buildAdapters(ctx, st.cfg, builtin.Options{Logger: log, Version: d.opts.Version}, log)
	if err != nil {
		return nil, err
	}
	engineOwnsAdapters := false
	d.onCleanup(func() {
		if !engineOwnsAdapters {
			_ = registry.Close(context.Background())
		}
	})

	p, err := d.openDatabase(ctx)
	if err != nil {
		return nil, err
	}

	var gw atomic.Pointer[gateway.Gateway]
	eng, err := d.newEngine(ctx, p, registry, reg, metrics, &gw)
	if err != nil {
		return nil, err
	}
	if err := d.startConsole(ctx, consoleLn, p, eng, reg); err != nil {
		return nil, err
	}
	if err := d.startGateway(ctx, gatewayLn, p, registry, eng, &gw); err != nil {
		return nil, err
	}
	if err := startEngine(ctx, eng, 500*time.Millisecond, log); err != nil {
		return nil, err
	}
	engineOwnsAdapters = true
	d.engine.Store(eng)
	d.ready.setReady()
	log.Info("drainer started", "version", d.opts.Version, "schema", st.schema, "workers", st.workers,
		"lease", st.lease, "adapters", adapterSummary(st.cfg), "routes", len(st.cfg.Routes), "metrics_addr", addr)
	if d.opts.Started != nil {
		d.opts.Started(eng)
	}
	return eng, nil
}

// newEngine builds the engine on the pool, with tracing when configured,
// and registers its claim counters. The gateway, once it serves (gw), hears
// of its calls' rows settled by this engine at once.
func (d *daemonRun) newEngine(ctx context.Context, p *pgxpool.Pool, registry *dispatch.Registry, reg prometheus.Registerer,
	metrics *drainer.Metrics, gw *atomic.Pointer[gateway.Gateway]) (*drainer.Engine, error) {
	st, log := d.st, d.log
	tracer, err := d.startTracing(ctx)
	if err != nil {
		return nil, err
	}
	engCfg := d.opts.Engine
	engCfg.Schema, engCfg.Workers, engCfg.Lease, engCfg.Logger, engCfg.Metrics = st.schema, st.workers, st.lease, log, metrics
	engCfg.MaxInFlightBytes = st.maxInFlightBytes
	if tracer != nil {
		engCfg.Tracer = tracer
	}
	// The gateway, once it serves, hears of its calls' rows settled by this
	// engine at once (the settle notification is for other processes).
	engCfg.Settled = func(rows []store.Settle) {
		if g := gw.Load(); g != nil {
			g.Settled(rows)
		}
	}
	eng, err := drainer.New(p, NewRouting(st.cfg, registry), engCfg)
	if err != nil {
		return nil, err
	}
	// drainer_claimed_rows_total{cause}: how the claimed rows were found
	// (a notification, a poll the wake-up should have spared, ...).
	reg.MustRegister(eng.ClaimCollector())
	return eng, nil
}

// openDatabase connects to the database and waits for its schema, saying
// on /readyz what it waits for.
func (d *daemonRun) openDatabase(ctx context.Context) (*pgxpool.Pool, error) {
	st, log := d.st, d.log
	d.ready.notReady("starting: connecting to the database")
	p, err := connect(ctx, st.dbURL, st.workers, log, st.reread, func() {
		d.ready.notReady("starting: database unreachable; retrying (the log says why)")
	})
	if err != nil {
		return nil, err
	}
	d.onCleanup(func() { closePool(p, log) })
	d.pool.Store(p)
	d.ready.notReady("starting: checking the schema")
	if err := waitForSchema(ctx, p, st.schema, log, func() {
		d.ready.notReady("starting: the schema is not ready; waiting for drainer migrate (the log says why)")
	}); err != nil {
		return nil, err
	}
	warnNoVacuum(ctx, p, st.schema, log)
	d.ready.notReady("starting: the engine")
	return p, nil
}

// serveMetrics registers the daemon's metrics on reg and serves health
// and metrics; it returns the metrics and the address served. Every series
// a dashboard or an alert reads exists from then on, while the daemon may
// still wait for the database or a provider.
func (d *daemonRun) serveMetrics(reg *prometheus.Registry) (*drainer.Metrics, string, error) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := drainer.NewMetrics(reg, d.opts.Version)
	metrics.InitConfigured(routesByAdapter(d.st.cfg))
	d.gatewayMetrics = gateway.NewMetrics(reg, gatewayToolNames(d.st.cfg))
	metrics.Workers.Set(float64(d.st.workers))
	srv, err := serveHTTP(d.opts.MetricsAddr, reg, &d.ready, func(ctx context.Context) error { return d.pool.Load().Ping(ctx) },
		func() []drainer.AdapterState {
			if eng := d.engine.Load(); eng != nil {
				return eng.AdapterStates()
			}
			return nil
		}, d.log)
	if err != nil {
		return nil, "", err
	}
	d.onCleanup(func() { shutdownServer(srv) })
	return metrics, srv.Addr, nil
}

// shutdownServer stops srv, waiting at most 5 s for the requests under way.
func shutdownServer(srv *http.Server) {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
}

// startTracing starts the tracer (nil when tracing is off), stopped by
// cleanup.
func (d *daemonRun) startTracing(ctx context.Context) (trace.Tracer, error) {
	tracer, stopTracing, err := newTracer(ctx, d.opts.Version, d.log)
	if err != nil {
		return nil, &ConfigError{fmt.Errorf("tracing: %w", err)}
	}
	d.onCleanup(func() { stopWithin(stopTracing, 5*time.Second) })
	return tracer, nil
}

// stopWithin calls stop with a context that ends after d.
func stopWithin(stop func(context.Context), d time.Duration) {
	sctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	stop(sctx)
}

func isConfigError(err error) bool {
	_, ok := errors.AsType[*ConfigError](err)
	return ok
}

// buildAdapters builds the configured adapters. A configuration problem
// (a tool the provider lacks, a server that is not what the config says)
// is a ConfigError; a provider that cannot be reached yet (every error
// dispatch.ErrUnavailable) is waited for with backoff, as the database is,
// so a provider restarting during a rollout does not crash-loop the daemon.
func buildAdapters(ctx context.Context, cfg *config.Config, opts builtin.Options, log *slog.Logger) (*dispatch.Registry, error) {
	var registry *dispatch.Registry
	err := retryStartup(ctx, 500*time.Millisecond, log, "provider unreachable at startup; retrying",
		func() (err error) { registry, err = builtin.Build(ctx, cfg, opts); return err },
		func(err error) bool { return !dispatch.Unavailable(err) })
	if err != nil && ctx.Err() == nil {
		return nil, &ConfigError{err}
	}
	return registry, err
}

// starter is the part of the engine startEngine needs.
type starter interface {
	Start(ctx context.Context) error
}

// startEngine starts eng, retrying with backoff (from delay) while its first
// reads fail: the database can restart between the schema check and the
// engine's start, and that must not end the process. A schema that is not
// ready (or needs a newer daemon) ends it at once, as does ctx.
func startEngine(ctx context.Context, eng starter, delay time.Duration, log *slog.Logger) error {
	return retryStartup(ctx, delay, log, "engine could not start (database unavailable?); retrying",
		func() error { return eng.Start(ctx) },
		func(err error) bool { return errors.Is(err, migrations.ErrSchemaNotReady) })
}

// waitForSchema waits until the schema is migrated; a schema that needs a
// newer daemon is refused at once.
func waitForSchema(ctx context.Context, pool *pgxpool.Pool, schema string, log *slog.Logger, waiting func()) error {
	return retryStartup(ctx, time.Second, log, "schema not ready; waiting",
		func() error {
			_, err := migrations.Check(ctx, pool, schema)
			if err != nil {
				waiting()
			}
			return err
		},
		func(err error) bool { return strings.Contains(err.Error(), "upgrade drainer") })
}

// retryStartup calls try until it succeeds, logging each failure as msg
// and waiting between tries from delay on, doubled each time up to 30 s. An
// error final says cannot pass by waiting ends it at once, as does ctx.
func retryStartup(ctx context.Context, delay time.Duration, log *slog.Logger, msg string, try func() error, final func(error) bool) error {
	for {
		err := try()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if final(err) {
			return err
		}
		log.Error(msg, "err", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(delay*2, 30*time.Second)
	}
}

func serveHTTP(addr string, reg *prometheus.Registry, ready *readiness, ping func(context.Context) error,
	adapters func() []drainer.AdapterState, log *slog.Logger) (*http.Server, error) {
	if addr == "" {
		addr = ":9753"
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("/readyz", readyz(ready, ping, adapters))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &ConfigError{fmt.Errorf("--metrics-addr: listen on %s: %w", addr, err)} // a setting, as the gateway's
	}
	// Its requests are GETs without a body; a scraper's kept-alive
	// connection is let go after IdleTimeout (past a one-minute scrape interval).
	srv := &http.Server{Handler: mux, Addr: ln.Addr().String(), ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	return srv, nil
}

// routesByAdapter maps each configured adapter to the tools routed to it,
// as NewRouting routes them (the compensation_failed alert included).
func routesByAdapter(cfg *config.Config) map[string][]string {
	out := make(map[string][]string, len(cfg.Adapters))
	for name := range cfg.Adapters {
		out[name] = nil
	}
	add := func(adapter, tool string) {
		if _, ok := out[adapter]; ok {
			out[adapter] = append(out[adapter], tool)
		}
	}
	for tool, r := range cfg.Routes {
		add(r.Adapter, tool)
	}
	if a := cfg.Alerts.CompensationFailed; a != "" {
		add(a, outbox.AlertTool)
	}
	return out
}

func adapterSummary(cfg *config.Config) string {
	parts := make([]string, 0, len(cfg.Adapters))
	for name, a := range cfg.Adapters {
		parts = append(parts, name+"("+a.Type+")")
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
