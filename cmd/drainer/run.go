package main

import (
	"context"
	"errors"
	"fmt"
	"net"
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
			if err := g.validateSchema(); err != nil {
				return err
			}
			if g.databaseURL != "" {
				if err := g.checkDatabaseURL(); err != nil {
					return err
				}
			}
			if err := checkRunFlags(cmd, opts); err != nil {
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
			stopHUP := make(chan struct{})
			defer close(stopHUP)
			go func() {
				for {
					select {
					case <-hup:
					case <-stopHUP:
						return
					}
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
	cmd.Flags().IntVar(&opts.Workers, "workers", 0, fmt.Sprintf("worker slots, 1..%d (default: the config's workers, else %d)", config.MaxWorkers, config.DefaultWorkers))
	cmd.Flags().StringVar(&opts.MetricsAddr, "metrics-addr", ":9753", "address serving /metrics, /healthz and /readyz")
	cmd.Flags().StringVar(&opts.ConsoleAddr, "console-addr", "", "address serving the operator console, e.g. 127.0.0.1:9754 (default: the config's console.addr; off when neither is set)")
	cmd.Flags().StringVar(&opts.GatewayAddr, "gateway-addr", "", "address serving the durable MCP gateway at /mcp, e.g. 127.0.0.1:8790 (default: the config's gateway.addr; off when neither is set)")
	cmd.Flags().DurationVar(&opts.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long SIGTERM waits for calls under way (positive)")
	addDBFlags(cmd, g)
	return cmd
}

// checkRunFlags checks the values of run's flags before anything starts: a
// bad one is a usage error (exit 2) naming the flag, or its DRAINER_<FLAG>
// when the value came from the environment. An address that is well formed
// but taken stays a runtime error of the listener (exit 1).
func checkRunFlags(cmd *cobra.Command, opts daemon.Options) error {
	// Left unset, --workers is 0 and the config's workers (else the
	// default) is used; a value given must be one the engine takes.
	if cmd.Flags().Changed("workers") && (opts.Workers < 1 || opts.Workers > config.MaxWorkers) {
		hint := ""
		if opts.Workers == 0 {
			hint = " (leave it unset to use the config's workers)"
		}
		return usagef("%s: must be between 1 and %d, got %d%s", flagRef(cmd, "workers"), config.MaxWorkers, opts.Workers, hint)
	}
	if err := checkListenAddr(opts.MetricsAddr); err != nil {
		return usagef("%s: %v", flagRef(cmd, "metrics-addr"), err)
	}
	if opts.ShutdownTimeout <= 0 {
		return usagef("%s: must be positive, got %s", flagRef(cmd, "shutdown-timeout"), opts.ShutdownTimeout)
	}
	return nil
}

// checkListenAddr checks that addr has the host:port form a TCP listener
// takes (the host may be empty: every interface); "" is the default.
func checkListenAddr(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		if port == "" {
			err = errors.New("missing port")
		} else if _, perr := net.LookupPort("tcp", port); perr != nil {
			err = fmt.Errorf("invalid port %q", port)
		}
	}
	if err != nil {
		return fmt.Errorf("%q is not a host:port address like :9753 or 127.0.0.1:9753 (%v)", addr, unwrapAddrError(err))
	}
	return nil
}

// unwrapAddrError keeps the reason of a *net.AddrError, whose Error
// repeats the address.
func unwrapAddrError(err error) error {
	var ae *net.AddrError
	if errors.As(err, &ae) {
		return errors.New(ae.Err)
	}
	return err
}

// validateSchema checks --schema (or DRAINER_SCHEMA), naming where its
// value came from.
func (g *globals) validateSchema() error {
	if err := migrations.ValidateSchema(g.schema); err != nil {
		return usagef("%s: %v", flagRef(g.cmd, "schema"), err)
	}
	return nil
}
