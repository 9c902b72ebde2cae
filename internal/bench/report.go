package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes res as one JSON object.
func WriteJSON(w io.Writer, res *Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// WriteTable writes res as an aligned table: one line per figure, with its
// JSON field name and how it was measured.
func WriteTable(w io.Writer, res *Result) error {
	mode := "full"
	if res.Quick {
		mode = "quick"
	}
	audit := "off"
	if res.Audit {
		audit = "on"
	}
	fmt.Fprintf(w, "drainer bench (%s, %.0fs): PostgreSQL %s, %s\n", mode, res.DurationS, res.PostgresVersion, res.Server)
	fmt.Fprintf(w, "%d replicas × %d workers (claim batch %d), shipped default config, no-op adapter, audit triggers %s\n\n",
		res.Replicas, res.Workers, res.BatchSize, audit)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tVALUE\tFIELD\tHOW")
	row := func(name, value, field, how string) { fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, value, field, how) }
	row("drain", rate(res.DrainRowsPerS, "rows/s"), "drain_rows_per_s",
		fmt.Sprintf("%d rows, engine start → all succeeded, best of %s; %.1f rows per claim", res.Rows, floats(res.DrainRuns), res.DrainClaimBatchAvg))
	river := make([]string, 0, len(res.RiverRuns))
	for _, r := range res.RiverRuns {
		river = append(river, fmt.Sprintf("%.0f@%g/%gms", r.JobsPerS, r.FetchCooldownMs, r.FetchPollIntervalMs))
	}
	row("river", rate(res.RiverJobsPerS, "jobs/s"), "river_jobs_per_s",
		fmt.Sprintf("%d jobs, best of fetch cooldown/poll: %s", res.Rows, strings.Join(river, ", ")))
	row("drain ÷ river", fmt.Sprintf("%.3f", res.RatioVsRiver), "ratio_vs_river", "")
	ceiling := make([]string, 0, len(res.CeilingRuns))
	for _, c := range res.CeilingRuns {
		ceiling = append(ceiling, fmt.Sprintf("%.0f@%d×%d", c.RowsPerS, c.Loops, c.Batch))
	}
	row("ceiling", rate(res.CeilingRowsPerS, "rows/s"), "ceiling_rows_per_s",
		fmt.Sprintf("bare claim + complete, same schema and triggers, best of rows/s@loops×batch: %s", strings.Join(ceiling, ", ")))
	row("drain ÷ ceiling", fmt.Sprintf("%.3f", res.RatioVsCeiling), "ratio_vs_ceiling", "")
	row("backlog ratio", fmt.Sprintf("%.3f", res.BacklogRatio), "backlog_ratio",
		fmt.Sprintf("first %d rows: %.0f rows/s from %d pending ÷ %.0f rows/s from %d pending",
			res.BacklogMeasuredRows, res.BacklogLargeRowsPerS, res.BacklogRows, res.BacklogSmallRowsPerS, res.BacklogSmallRows))
	row("latency p50", fmt.Sprintf("%.2f ms", res.LatencyP50Ms), "latency_p50_ms",
		fmt.Sprintf("commit → dispatch start, %d rows at %.0f rows/s offered (%.0f achieved)",
			res.LatencySamples, res.LatencyOfferedRowsPerS, res.LatencyAchievedRowsPerS))
	row("latency p90", fmt.Sprintf("%.2f ms", res.LatencyP90Ms), "latency_p90_ms", "")
	row("latency p99", fmt.Sprintf("%.2f ms", res.LatencyP99Ms), "latency_p99_ms", "")
	row("peak RSS", mib(res.PeakRSSBytes), "peak_rss_bytes",
		fmt.Sprintf("process maxrss after the drain, all %d replicas in one process", res.Replicas))
	row("process peak RSS", mib(res.ProcessPeakRSSBytes), "process_peak_rss_bytes", "whole bench run, River and producers included")
	return tw.Flush()
}

func rate(v float64, unit string) string { return fmt.Sprintf("%.0f %s", v, unit) }

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func floats(vs []float64) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("%.0f", v)
	}
	return strings.Join(parts, ", ")
}
