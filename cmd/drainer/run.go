package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/internal/daemon"
	"github.com/drainer-io/drainer/migrations"
	"github.com/spf13/cobra"
)

func newRunCmd(g *globals) *cobra.Command {
	var opts daemon.Options
	cmd := &cobra.Command{
		Use:   "run --config FILE",
		Short: "Run the drain daemon",
		Long: `Run the drain daemon. It serves /metrics, /healthz and /readyz on --metrics-addr,
and the operator console on --console-addr when set.

SIGTERM or SIGINT: stop claiming, wait for calls under way up to
--shutdown-timeout, then cancel them. Rows not yet sent go back to pending with
their attempt given back; cut-off calls count as an attempt (outcome_unknown on
non_idempotent routes). SIGHUP reloads the config; a bad one is refused and the
running one kept.`,
		Args:        cobra.NoArgs,
		Annotations: map[string]string{ownsSignals: "yes"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.ConfigPath == "" {
				return usagef("--config is required")
			}
			if err := validateSchemaFlag(g.schema); err != nil {
				return err
			}
			log := cmdLogger(cmd)
			ctx, stop := shutdownContext(context.Background(), func(sig os.Signal) {
				log.Info("shutdown signal received: no new claims; stopping", "signal", sig.String())
			})
			defer stop()
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			reload := make(chan struct{}, 1)
			go func() {
				for range hup {
					select {
					case reload <- struct{}{}:
					default:
					}
				}
			}()
			if v := os.Getenv("DRAINER_TEST_CLOCK_SKEW"); v != "" {
				// Test-only: play a replica whose wall clock is wrong (the
				// database clock rules scheduling; see dispatch.SetClockSkew).
				d, err := time.ParseDuration(v)
				if err != nil {
					return usagef("DRAINER_TEST_CLOCK_SKEW: %v", err)
				}
				dispatch.SetClockSkew(d)
				log.Warn("test clock skew in force", "skew", d)
			}
			opts.DatabaseURL, opts.Schema, opts.Logger, opts.Version, opts.Reload = g.databaseURL, g.schema, log, version, reload
			return daemon.Run(ctx, opts)
		},
	}
	cmd.Flags().StringVar(&opts.ConfigPath, "config", "", "config file (YAML)")
	cmd.Flags().IntVar(&opts.Workers, "workers", 0, fmt.Sprintf("worker slots (default: the config's workers, else %d)", config.DefaultWorkers))
	cmd.Flags().StringVar(&opts.MetricsAddr, "metrics-addr", ":9753", "address serving /metrics, /healthz and /readyz")
	cmd.Flags().StringVar(&opts.ConsoleAddr, "console-addr", "", "address serving the operator console, e.g. 127.0.0.1:9754 (default: the config's console.addr; off when neither is set)")
	cmd.Flags().StringVar(&opts.GatewayAddr, "gateway-addr", "", "address serving the durable MCP gateway at /mcp, e.g. 127.0.0.1:8790 (default: the config's gateway.addr; off when neither is set)")
	cmd.Flags().DurationVar(&opts.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long SIGTERM waits for calls under way")
	addDBFlags(cmd, g)
	return cmd
}

func validateSchemaFlag(schema string) error {
	if err := migrations.ValidateSchema(schema); err != nil {
		return usageError{err}
	}
	return nil
}
