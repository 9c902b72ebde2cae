package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/internal/bench"
	"github.com/spf13/cobra"
)

// benchOpts are the flags of `drainer bench`.
type benchOpts struct {
	bench.Options
	json       bool
	cpuProfile string
}

func newBenchCmd() *cobra.Command {
	var o benchOpts
	cmd := &cobra.Command{
		Use:   "bench [--quick] [--json] [--database-url URL] [--workers N] [--replicas N]",
		Short: "Measure drain throughput, latency and memory, and compare with River",
		Long: `Measure the drain engine with a no-op adapter and the shipped default config
(the config package's defaults; workers 16 unless --workers), --replicas engines
in this process (each its own pool), on a throwaway durable Postgres (fsync on)
unless --database-url names one. Reports (CONTRACT §8):

  drain_rows_per_s    pre-filled backlog, engine start until all rows succeeded
  river_jobs_per_s    River v0.51.1 on the same server and job count, same
                      total workers, best of a few fetch settings
  ceiling_rows_per_s  bare claim (FOR UPDATE SKIP LOCKED) + batch complete loop,
                      same schema and audit triggers
  backlog_ratio       rate over the first 10^4 rows of a 10^6 backlog (10^5
                      with --quick) ÷ the same from a 10^4 backlog
  latency_p99_ms      enqueue commit → dispatch start at half the drain rate
  peak_rss_bytes      process maxrss after the drain (all replicas together)

and ratio_vs_river, ratio_vs_ceiling, latency_p50_ms and how each was measured.
Progress goes to stderr; the table, or with --json one JSON object, to stdout.
--quick finishes within 3 minutes on 2 cores; a full run takes 5 to 10.

On a --database-url server bench works in schemas of its own (--schema and
--schema + "_river"), refuses a schema it did not create, and drops them after.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Zero would mean "default" to the library; on the command line it is a mistake.
			if o.Workers < 1 || o.Replicas < 1 {
				return usagef("--workers (%d) and --replicas (%d) must be at least 1", o.Workers, o.Replicas)
			}
			if err := o.Validate(); err != nil {
				return usageError{err}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBench(ctx, cmd, o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.Quick, "quick", false, "smaller runs: every figure within 3 minutes on 2 cores")
	f.BoolVar(&o.json, "json", false, "print one JSON object instead of a table")
	f.StringVar(&o.DatabaseURL, "database-url", "", "Postgres to measure on (default: a throwaway durable cluster)")
	f.StringVar(&o.Schema, "schema", bench.DefaultSchema, "scratch schema bench creates and drops (River's: SCHEMA_river)")
	f.IntVar(&o.Workers, "workers", config.DefaultWorkers, "workers per replica (and River MaxWorkers per client)")
	f.IntVar(&o.Replicas, "replicas", bench.DefaultReplicas, "engines in this process, each its own pool (and River clients)")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the drain runs to this file (go tool pprof -top FILE)")
	return cmd
}

func runBench(ctx context.Context, cmd *cobra.Command, o benchOpts) (err error) {
	o.Progress, o.Version = cmd.ErrOrStderr(), version
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer func() {
			if cerr := f.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("cpu profile: %w", cerr)
			}
		}()
		o.DrainCPUProfile = f
	}
	res, err := bench.Run(ctx, o.Options)
	if err != nil {
		return err
	}
	if o.json {
		return bench.WriteJSON(cmd.OutOrStdout(), res)
	}
	return bench.WriteTable(cmd.OutOrStdout(), res)
}
