package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch/builtin"
	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/internal/catalog"
	"github.com/drainer-io/drainer/internal/fleet"
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

	var ready atomic.Bool
	srv, err := serveHTTP(opts.MetricsAddr, reg, &ready, func(context.Context) error { return nil }, func() []drainer.AdapterState { return nil }, log)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if opts.ConsoleAddr != "" || st.cfg.Console.Addr != "" {
		log.Warn("the operator console is not served with databases: (it reads one database)")
	}

	registry, err := buildAdapters(ctx, st.cfg, builtin.Options{Logger: log, Version: opts.Version}, log)
	if err != nil {
		if ctx.Err() != nil && !isConfigError(err) {
			return nil
		}
		return err
	}
	defer func() { _ = registry.Close(context.Background()) }()

	tracer, stopTracing, err := newTracer(ctx, opts.Version, log)
	if err != nil {
		return &ConfigError{fmt.Errorf("tracing: %w", err)}
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stopTracing(sctx)
	}()

	cat := catalog.New(st.cfg.Databases, log)
	defer cat.Close()
	engCfg := opts.Engine
	engCfg.Workers, engCfg.Lease = st.workers, st.lease
	if tracer != nil {
		engCfg.Tracer = tracer
	}
	f, err := fleet.New(fleet.Config{
		Source:          catalogSource(cat),
		CoordinationURL: coordURL,
		Schema:          st.schema,
		Lease:           st.lease,
		Refresh:         st.cfg.Databases.Refresh,
		StopTimeout:     cmp.Or(opts.ShutdownTimeout, 30*time.Second),
		Engine:          engCfg,
		Routing:         func() *drainer.Routing { return NewRouting(st.cfg, registry) },
		Registerer:      reg,
		Version:         opts.Version,
		Logger:          log,
	})
	if err != nil {
		return &ConfigError{err}
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-opts.Reload:
				log.Warn("reload ignored with databases: restart the replica to apply a new config (its databases move to the others meanwhile)")
			}
		}
	}()
	log.Info("drainer fleet starting", "version", opts.Version, "member", f.ID(), "schema", st.schema,
		"workers_per_database", st.workers, "lease", st.lease, "refresh", st.cfg.Databases.Refresh,
		"adapters", adapterSummary(st.cfg), "routes", len(st.cfg.Routes), "metrics_addr", srv.Addr)
	ready.Store(true)
	defer ready.Store(false)
	return f.Run(ctx)
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
