package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/tooling/bench"
	"github.com/spf13/cobra"
)

// benchOpts are the flags of `drainer bench`.
type benchOpts struct {
	bench.Options
	json       bool
	cpuProfile string
	memProfile string
}

func newBenchCmd() *cobra.Command {
	var o benchOpts
	cmd := &cobra.Command{
		Use:   "bench [--quick] [--json] [--database-url URL] [--workers N] [--replicas N]",
		Short: "Measure drain throughput, latency and memory, and compare with River",
		Long: `Measure the drain engine with a no-op adapter and the shipped default config
(workers 64 unless --workers), --replicas engines (each its own pool), on a
throwaway durable Postgres (fsync on) unless --database-url names one.
Every rate is measured in the same run on the same server with the same row
count. Reports the fields of docs/reference.md §8 (docs/benchmarks.md says how each
is measured):

  drain_rows_per_s, drain_no_audit_rows_per_s, audit_cost
  river_jobs_per_s, ratio_vs_river      River at its own bench settings and at --workers
  ceiling_rows_per_s, ratio_vs_ceiling  bare claim + complete loop on a minimal table
  backlog_ratio                         first 10^4 rows of 10^6 (--quick 10^5) ÷ of 10^4
  latency_p50_ms, latency_p99_ms, latency_achieved_ratio            producers at 10 % of the drain rate
  latency_half_p50_ms, latency_half_p99_ms, latency_half_achieved_ratio   at 50 %
  dead_tuples_after                     dead tuples once the large backlog drained
  xmin_ratio                            drain while a snapshot is held ÷ without
  http_rows_per_s, http_in_flight_max   http adapter, provider answering after 50ms
  enqueue_single_rows_per_s, insert_single_rows_per_s, enqueue_batch_rows_per_s
  gateway_overhead_p50_ms, gateway_overhead_p99_ms   tools/call through the MCP gateway − direct
  peak_rss_bytes                        largest replica process, 1,000 in flight

plus xacts_per_row and wal_bytes_per_row of the drain (audit on) and how each figure was
measured. Progress goes to stderr; the table, or with --json one JSON object,
to stdout. --quick finishes within 3 minutes on 2 cores; a full run takes
about 10.

On a --database-url server bench works in schemas of its own (--schema and
--schema + "_river"), refuses a schema it did not create (such as a live
drainer schema), and drops what it created when done or interrupted.`,
		Args:        cobra.NoArgs,
		Annotations: map[string]string{ownsSignals: "yes"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Zero would mean "default" to the library; on the command line it is a mistake.
			if o.Workers < 1 || o.Replicas < 1 {
				return usagef("--workers (%d) and --replicas (%d) must be at least 1", o.Workers, o.Replicas)
			}
			if err := o.Validate(); err != nil {
				return usageError{err}
			}
			ctx, stop := shutdownContext(cmd.Context(), nil)
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
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the drain runs (of the gateway calls, with --phases gateway) to this file (go tool pprof -top FILE)")
	f.StringVar(&o.memProfile, "memprofile", "", "write what the same runs allocated to this file, and the profile at their start to FILE.base (go tool pprof -sample_index=alloc_space -base FILE.base -top FILE)")
	f.BoolVar(&o.WaitEvents, "wait-events", false, "sample the replicas' wait events (pg_stat_activity) during the drain runs")
	f.StringSliceVar(&o.Phases, "phases", nil, "run only these phases (drain,no-audit,ceiling,river,backlog,latency,xmin,http,enqueue,gateway,rss)")
	cmd.AddCommand(newBenchReplicaCmd())
	return cmd
}

// newBenchReplicaCmd is the hidden `bench replica`: one replica process of
// the peak_rss_bytes phase, started by bench with its spec in the
// environment (bench.EnvReplica). It drains until SIGTERM.
func newBenchReplicaCmd() *cobra.Command {
	return &cobra.Command{
		Use:         "replica",
		Short:       "One replica process of drainer bench (started by bench)",
		Hidden:      true,
		Args:        cobra.NoArgs,
		Annotations: map[string]string{ownsSignals: "yes"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Getenv(bench.EnvReplica) == "" {
				return usagef("bench replica is started by drainer bench, with %s set", bench.EnvReplica)
			}
			ctx, stop := shutdownContext(cmd.Context(), nil)
			defer stop()
			return bench.RunReplicaFromEnv(ctx, cmd.OutOrStdout())
		},
	}
}

func runBench(ctx context.Context, cmd *cobra.Command, o benchOpts) (err error) {
	o.Progress, o.Version = cmd.ErrOrStderr(), version
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the drainer binary for the replica processes: %w", err)
	}
	o.ReplicaCommand = []string{exe, "bench", "replica"}
	var files []*os.File
	defer func() {
		for _, f := range files {
			if cerr := f.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("profile: %w", cerr)
			}
		}
	}()
	create := func(path string, to *io.Writer) error {
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("profile: %w", err)
		}
		files = append(files, f)
		*to = f
		return nil
	}
	if o.cpuProfile != "" {
		if err := create(o.cpuProfile, &o.DrainCPUProfile); err != nil {
			return err
		}
	}
	if o.memProfile != "" {
		if err := create(o.memProfile, &o.DrainMemProfile); err != nil {
			return err
		}
		if err := create(o.memProfile+".base", &o.DrainMemProfileBase); err != nil {
			return err
		}
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
