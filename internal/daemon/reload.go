package daemon

import (
	"cmp"
	"context"
	"log/slog"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch/builtin"
	"github.com/drainer-io/drainer/drainer"
)

// reload loads the config again; a bad one is refused and the old one kept.
func reload(ctx context.Context, eng *drainer.Engine, opts Options, log *slog.Logger) {
	if opts.ConfigPath == "" {
		log.Warn("reload ignored: no config file")
		return
	}
	cfg, err := config.Load(opts.ConfigPath, config.LoadOptions{})
	if err != nil {
		log.Error("config reload refused; keeping the running config", "err", err)
		return
	}
	lease := cmp.Or(cfg.Lease, config.DefaultLease)
	if lease != eng.Config().Lease {
		log.Warn("lease changes take effect on restart", "running", eng.Config().Lease, "file", lease)
	}
	if b := int64(cmp.Or(cfg.MaxInFlightBytes, config.DefaultMaxInFlightBytes)); b != eng.Config().MaxInFlightBytes {
		log.Warn("max_in_flight_bytes changes take effect on restart", "running", eng.Config().MaxInFlightBytes, "file", b)
	}
	registry, err := builtin.Build(ctx, cfg, builtin.Options{Logger: log, Version: opts.Version})
	if err != nil {
		log.Error("config reload refused; keeping the running config", "err", err)
		return
	}
	eng.Reload(NewRouting(cfg, registry))
	log.Info("config reloaded", "adapters", adapterSummary(cfg), "routes", len(cfg.Routes))
}
