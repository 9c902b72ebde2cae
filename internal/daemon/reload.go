package daemon

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch/builtin"
	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/gateway"
)

// reload loads the config again; a bad one is refused and the old one kept.
// The gateway (gw, nil when none runs) takes the new token and wait at
// once; its address and abort_tool take a restart.
func reload(ctx context.Context, eng *drainer.Engine, gw *gateway.Gateway, running config.Gateway, opts Options, log *slog.Logger) {
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
	if gw != nil {
		if err := gw.Reconfigure(cfg.Gateway.Token.Reveal(), cfg.Gateway.Wait); err != nil {
			_ = registry.Close(context.Background())
			log.Error("config reload refused; keeping the running config", "err", fmt.Errorf("gateway: %w", err))
			return
		}
		if cfg.Gateway.Addr != running.Addr && opts.GatewayAddr == "" {
			log.Warn("gateway.addr changes take effect on restart", "running", running.Addr, "file", cfg.Gateway.Addr)
		}
		if cfg.Gateway.AbortTool != running.AbortTool {
			log.Warn("gateway.abort_tool changes take effect on restart", "running", running.AbortTool, "file", cfg.Gateway.AbortTool)
		}
	}
	eng.Reload(NewRouting(cfg, registry))
	attrs := []any{"adapters", adapterSummary(cfg), "routes", len(cfg.Routes)}
	if gw != nil {
		attrs = append(attrs, "gateway_token", cfg.Gateway.Token.Reveal() != "", "gateway_wait", cmp.Or(cfg.Gateway.Wait, gateway.DefaultWait))
	}
	log.Info("config reloaded", attrs...)
}
