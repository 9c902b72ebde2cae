package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/builtin"
	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/internal/catalog"
	"github.com/drainer-io/drainer/internal/console"
	"github.com/drainer-io/drainer/internal/fleet"
	"github.com/drainer-io/drainer/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// runFleet is Run with databases: in the config: one fleet of replicas
// drains every database listed, this replica those assigned to it
// (internal/fleet), on adapters shared by all of them. Logs and metrics
// name databases by their name, never by their url.
func runFleet(ctx context.Context, st settings, opts Options, log *slog.Logger) error {
	coordURL, err := coordinationURL(st.cfg.Databases)
	if err != nil {
		return &ConfigError{err}
	}
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var ready readiness
	srv, err := serveHTTP(opts.MetricsAddr, reg, &ready, func(context.Context) error { return nil }, func() []drainer.AdapterState { return nil }, log)
	if err != nil {
		return err
	}
	defer shutdownServer(srv)
	// The console's address is taken before anything slow, so a taken one
	// is refused at once.
	var consoleLn net.Listener
	if addr := cmp.Or(opts.ConsoleAddr, st.cfg.Console.Addr); addr != "" {
		if consoleLn, err = console.Listen(addr); err != nil {
			return &ConfigError{fmt.Errorf("%s: %w", consoleAddrFrom(opts.ConsoleAddr), err)}
		}
		defer func() { _ = consoleLn.Close() }()
	}

	registry, err := buildAdapters(ctx, st.cfg, builtin.Options{Logger: log, Version: opts.Version}, log)
	if err != nil {
		if ctx.Err() != nil && !isConfigError(err) {
			return nil
		}
		return err
	}
	// The fleet closes the registry once New took it (after Run, or once a
	// reload replaced it and no engine uses it any more).
	owned := false
	defer func() {
		if !owned {
			_ = registry.Close(context.Background())
		}
	}()

	tracer, stopTracing, err := newTracer(ctx, opts.Version, log)
	if err != nil {
		return &ConfigError{fmt.Errorf("tracing: %w", err)}
	}
	defer stopWithin(stopTracing, 5*time.Second)

	// One connection to the coordination database, the catalog's when
	// there is one: the catalog query runs over it too, between the
	// heartbeats, so a replica holds one catalog connection, not two.
	coord, err := fleet.OpenCoordination(coordURL, func() (string, error) { return coordinationURL(st.cfg.Databases) })
	if err != nil {
		return &ConfigError{err}
	}
	defer store.ClosePool(coord, poolCloseWait)
	src := newSwappableCatalog(st.cfg.Databases, coord, log)
	defer src.close()
	f, err := newFleet(st, opts, src, coord, registry, reg, tracer, log)
	if err != nil {
		return &ConfigError{err}
	}
	var rt fleetRouting
	rt.set(st.cfg, registry)
	if consoleLn != nil {
		stop, err := startFleetConsole(ctx, consoleLn, st, opts, f, &rt, reg, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	owned = true
	defer watchReloads(ctx, f, src, &rt, st, opts, log)() // no reload is under way once Run returns
	log.Info("drainer fleet starting", "version", opts.Version, "member", f.ID(), "schema", st.schema,
		"workers_per_database", st.workers, "lease", st.lease, "refresh", st.cfg.Databases.Refresh,
		"adapters", adapterSummary(st.cfg), "routes", len(st.cfg.Routes), "metrics_addr", srv.Addr)
	defer readyOnceStarted(f, &ready)()
	return f.Run(ctx)
}

// readyOnceStarted makes /readyz answer 200 once the fleet has made its
// first assignment (fleet.Fleet.Started): its engines start on the
// databases assigned to it, each retried on its own while it cannot. A
// database that does not answer, the coordination database or the catalog
// included, holds back neither the others nor readiness: without the
// membership the replica drains every listed database as a fleet of one.
// The returned stop makes /readyz answer 503 again (stopping).
func readyOnceStarted(f *fleet.Fleet, ready *readiness) (stop func()) {
	ready.notReady("starting: listing the databases and joining the fleet")
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-f.Started():
			ready.setReady()
		case <-done:
		}
	})
	return func() {
		close(done)
		wg.Wait()
		ready.notReady("stopping")
	}
}

// newFleet builds the fleet of runFleet.
func newFleet(st settings, opts Options, src *swappableCatalog, coord *pgxpool.Pool, registry *dispatch.Registry,
	reg prometheus.Registerer, tracer trace.Tracer, log *slog.Logger) (*fleet.Fleet, error) {
	engCfg := opts.Engine
	engCfg.Workers, engCfg.Lease, engCfg.MaxInFlightBytes = st.workers, st.lease, st.maxInFlightBytes
	if tracer != nil {
		engCfg.Tracer = tracer
	}
	return fleet.New(fleet.Config{
		Source: src.list, Coordination: coord, CoordinationName: coordinationName(st.cfg.Databases),
		Schema: st.schema, Lease: st.lease,
		Refresh:       st.cfg.Databases.Refresh,
		StopTimeout:   cmp.Or(opts.ShutdownTimeout, 30*time.Second),
		Engine:        engCfg,
		Routing:       func() *drainer.Routing { return NewRouting(st.cfg, registry) },
		CloseAdapters: closeAdapters(registry, log),
		Registerer:    reg, Version: opts.Version, Logger: log,
		Known:   staticNames(st.cfg.Databases),
		Checked: warnNoVacuumOnce(st.schema, log),
	})
}

// warnNoVacuumOnce runs warnNoVacuum for each database of a fleet the
// first time its engine starts in this process (an engine starts again on
// every move between replicas), its lines naming the database.
func warnNoVacuumOnce(schema string, log *slog.Logger) func(context.Context, string, *pgxpool.Pool) {
	var checked sync.Map
	return func(ctx context.Context, name string, pool *pgxpool.Pool) {
		if _, done := checked.LoadOrStore(name, true); !done {
			warnNoVacuum(ctx, pool, schema, log.With("database", name))
		}
	}
}

// watchReloads reloads the fleet's config on each of opts.Reload until the
// returned stop is called; stop returns once no reload is under way.
func watchReloads(ctx context.Context, f *fleet.Fleet, src *swappableCatalog, rt *fleetRouting, st settings, opts Options,
	log *slog.Logger) (stop func()) {
	reloads := make(chan struct{})
	rctx, stopReloads := context.WithCancel(ctx)
	go func() {
		defer close(reloads)
		running := st
		for {
			select {
			case <-rctx.Done():
				return
			case <-opts.Reload:
				if next, ok := reloadFleet(rctx, f, src, rt, running, opts, log); ok {
					running = next
				}
			}
		}
	}()
	return func() {
		stopReloads()
		<-reloads
	}
}

// reloadFleet loads the config again for a running fleet. A bad config is
// refused and nothing changes. Otherwise new adapters are built once and
// swapped into every engine (rows leased before finish on the old ones,
// closed by the fleet once no engine uses them), and a changed databases:
// section replaces the list the fleet reads. What cannot change live is
// logged with its running and file values (names, never urls). It returns
// the settings now in force; the console's rt follows.
func reloadFleet(ctx context.Context, f *fleet.Fleet, src *swappableCatalog, rt *fleetRouting, running settings, opts Options,
	log *slog.Logger) (settings, bool) {
	if opts.ConfigPath == "" {
		log.Warn("reload ignored: no config file")
		return running, false
	}
	cfg, err := config.Load(opts.ConfigPath, config.LoadOptions{})
	if err != nil {
		log.Error("config reload refused; keeping the running config", "err", err)
		return running, false
	}
	if cfg.Databases == nil {
		log.Error("config reload refused; keeping the running config",
			"err", "the databases: section was removed: restart the replica to drain a single database")
		return running, false
	}
	registry, err := builtin.Build(ctx, cfg, builtin.Options{Logger: log, Version: opts.Version})
	if err != nil {
		log.Error("config reload refused; keeping the running config", "err", err)
		return running, false
	}
	for _, w := range cfg.Warnings {
		log.Warn("config warning", "warning", w)
	}
	if lease := cmp.Or(cfg.Lease, config.DefaultLease); lease != running.lease {
		log.Warn("lease changes take effect on restart", "running", running.lease, "file", lease)
	}
	if workers := cmp.Or(opts.Workers, cfg.Workers, config.DefaultWorkers); workers != running.workers {
		log.Warn("workers per database changes take effect on restart", "running", running.workers, "file", workers)
	}
	if b := int64(cmp.Or(cfg.MaxInFlightBytes, config.DefaultMaxInFlightBytes)); b != running.maxInFlightBytes {
		log.Warn("max_in_flight_bytes changes take effect on restart", "running", running.maxInFlightBytes, "file", b)
	}
	// The membership stays where it is until restart; the list itself is
	// read from the new section at once.
	if was, now := coordinationName(running.cfg.Databases), coordinationName(cfg.Databases); was != now {
		log.Warn("coordination database changes take effect on restart", "running", was, "file", now)
	} else if was == catalogCoordination && !sameQueryURL(running.cfg.Databases, cfg.Databases) {
		log.Warn("coordination database changes take effect on restart: databases.query.url changed (the list is read from the new catalog already)")
	}
	f.Reload(func() *drainer.Routing { return NewRouting(cfg, registry) }, closeAdapters(registry, log))
	rt.set(cfg, registry)
	changed := !sameDatabases(running.cfg.Databases, cfg.Databases)
	if changed {
		src.swap(cfg.Databases)
		f.Relist(cfg.Databases.Refresh)
	}
	log.Info("config reloaded", "adapters", adapterSummary(cfg), "routes", len(cfg.Routes), "databases_changed", changed)
	next := running
	next.cfg = cfg
	return next, true
}

// closeAdapters closes a registry the fleet is done with (replaced by a
// reload, or at shutdown).
func closeAdapters(registry *dispatch.Registry, log *slog.Logger) func() {
	return func() {
		if err := registry.Close(context.Background()); err != nil {
			log.Warn("closing adapters", "err", err)
			return
		}
		log.Info("adapters closed: no engine uses them any more")
	}
}

// catalogCoordination names the coordination database when it is the
// catalog's (databases.query.url, never logged).
const catalogCoordination = "the catalog database"

// coordinationName names the coordination database for logs: the catalog,
// or the first static database by name (as coordinationURL picks it).
func coordinationName(dbs *config.Databases) string {
	if dbs.Query != nil {
		return catalogCoordination
	}
	if len(dbs.Static) == 0 {
		return ""
	}
	return slices.MinFunc(dbs.Static, func(a, b config.DatabaseEntry) int { return strings.Compare(a.Name, b.Name) }).Name
}

// sameQueryURL reports whether both sections read the catalog at one url.
func sameQueryURL(a, b *config.Databases) bool {
	return a.Query != nil && b.Query != nil && a.Query.URL.Reveal() == b.Query.URL.Reveal()
}

// sameDatabases reports whether two databases: sections list the same
// databases the same way (static entries, query and refresh).
func sameDatabases(a, b *config.Databases) bool {
	if a.Refresh != b.Refresh || (a.Query == nil) != (b.Query == nil) ||
		(a.Query != nil && (a.Query.SQL != b.Query.SQL || !sameQueryURL(a, b))) {
		return false
	}
	return slices.EqualFunc(a.Static, b.Static, func(x, y config.DatabaseEntry) bool {
		return x.Name == y.Name && x.URL.Reveal() == y.URL.Reveal()
	})
}

// swappableCatalog is the fleet's Source over a catalog a reload may
// replace. A List and a swap never overlap, so the catalog replaced is
// closed once and never reopened by a List still under way.
type swappableCatalog struct {
	// The coordination connection, and the section the replica started
	// with, whose catalog (if any) is the coordination database until a
	// restart.
	coord   catalog.Querier
	started *config.Databases
	log     *slog.Logger

	mu  sync.Mutex
	cat *catalog.Catalog
}

func newSwappableCatalog(dbs *config.Databases, coord catalog.Querier, log *slog.Logger) *swappableCatalog {
	s := &swappableCatalog{coord: coord, started: dbs, log: log}
	s.cat = s.newCatalog(dbs)
	return s
}

// newCatalog lists dbs. A query at the url the replica started with runs
// over the coordination connection, which is to that database: one
// catalog connection, not two. A catalog a reload moved elsewhere has a
// connection of its own (the coordination database stays until restart).
func (s *swappableCatalog) newCatalog(dbs *config.Databases) *catalog.Catalog {
	if dbs.Query != nil && sameQueryURL(dbs, s.started) {
		return catalog.NewShared(dbs, s.coord, s.log)
	}
	return catalog.New(dbs, s.log)
}

func (s *swappableCatalog) list(ctx context.Context) ([]fleet.Database, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return catalogSource(s.cat)(ctx)
}

func (s *swappableCatalog) swap(dbs *config.Databases) {
	cat := s.newCatalog(dbs)
	s.mu.Lock()
	old := s.cat
	s.cat = cat
	s.mu.Unlock()
	old.Close()
}

func (s *swappableCatalog) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cat.Close()
}

// coordinationURL is where the fleet's membership lives: the catalog
// database when databases: has a query, else the first static database by
// name (every replica picks the same one).
func coordinationURL(dbs *config.Databases) (string, error) {
	if dbs.Query != nil {
		u, err := dbs.Query.ResolveURL()
		if err != nil {
			return "", fmt.Errorf("databases.query.url: %w", err)
		}
		return u.Reveal(), nil
	}
	if len(dbs.Static) == 0 {
		return "", errors.New("databases: neither static entries nor a query")
	}
	first := slices.MinFunc(dbs.Static, func(a, b config.DatabaseEntry) int { return strings.Compare(a.Name, b.Name) })
	u, err := first.ResolveURL()
	if err != nil {
		return "", fmt.Errorf("databases.static %s: url: %w", first.Name, err)
	}
	return u.Reveal(), nil
}

// staticNames are the names of the static entries: their series exist
// from startup.
func staticNames(dbs *config.Databases) []string {
	out := make([]string, len(dbs.Static))
	for i, e := range dbs.Static {
		out[i] = e.Name
	}
	return out
}

// catalogSource adapts the catalog to the fleet's Source.
func catalogSource(cat *catalog.Catalog) fleet.Source {
	return func(ctx context.Context) ([]fleet.Database, error) {
		list, err := cat.List(ctx)
		if list == nil {
			return nil, err
		}
		out := make([]fleet.Database, len(list))
		for i, d := range list {
			out[i] = fleet.Database{Name: d.Name, URL: d.URL.Reveal()}
		}
		return out, err
	}
}
