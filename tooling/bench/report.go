package bench

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
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
	writeTableHeader(w, res)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tVALUE\tFIELD\tHOW")
	row := func(name, value, field, how string) { fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, value, field, how) }
	drainRows(row, res)
	comparisonRows(row, res)
	conditionRows(row, res)
	httpRows(row, res)
	producerRows(row, res)
	gatewayRows(row, res)
	row("peak RSS", mib(res.PeakRSSBytes), "peak_rss_bytes",
		fmt.Sprintf("largest replica process (VmHWM), %d workers, at most %d rows in flight", res.RSSWorkers, res.RSSInFlightMax))
	waitEventRows(row, res)
	return tw.Flush()
}

// tableRow writes one line of the table: a figure's name, its value, its
// JSON field name and how it was measured.
type tableRow func(name, value, field, how string)

// writeTableHeader writes the lines above the table: how the run was made.
func writeTableHeader(w io.Writer, res *Result) {
	mode := "full"
	if res.Quick {
		mode = "quick"
	}
	audit := "off"
	if res.Audit {
		audit = "on"
	}
	fmt.Fprintf(w, "drainer bench (%s, %.0fs, load average %.2f → %.2f): PostgreSQL %s, %s\n",
		mode, res.DurationS, res.LoadAvgStart, res.LoadAvgEnd, res.PostgresVersion, res.Server)
	fmt.Fprintf(w, "%d replicas × %d workers (claim batch %d), shipped default config, no-op adapter, audit triggers %s, %d rows per rate\n\n",
		res.Replicas, res.Workers, res.BatchSize, audit, res.Rows)
}

// drainRows writes the drain figures, with and without audit, and what
// they cost the server.
func drainRows(row tableRow, res *Result) {
	row("drain", rate(res.DrainRowsPerS, "rows/s"), "drain_rows_per_s",
		fmt.Sprintf("engine start → all succeeded, best of %s; %.1f rows per claim", floats(res.DrainRuns), res.DrainClaimBatchAvg))
	row("  transactions per row", fmt.Sprintf("%.2f", res.XactsPerRow), "xacts_per_row", "pg_stat_database.xact_commit over the drain runs")
	row("  WAL per row", fmt.Sprintf("%.0f B", res.WALBytesPerRow), "wal_bytes_per_row", "pg_current_wal_lsn() over the drain runs")
	row("drain, no audit", rate(res.DrainNoAuditRowsPerS, "rows/s"), "drain_no_audit_rows_per_s",
		fmt.Sprintf("audit triggers disabled, best of %s; %.2f xacts, %.0f WAL bytes per row",
			floats(res.DrainNoAuditRuns), res.XactsPerRowNoAudit, res.WALBytesPerRowNoAudit))
	row("audit cost", fmt.Sprintf("%.3f", res.AuditCost), "audit_cost", "1 − drain ÷ drain without audit")
}

// comparisonRows writes what the drain is compared with: River and the
// bare claim/complete loops.
func comparisonRows(row tableRow, res *Result) {
	river := make([]string, 0, len(res.RiverRuns))
	for _, r := range res.RiverRuns {
		river = append(river, fmt.Sprintf("%.0f@%d workers", r.JobsPerS, r.Workers))
	}
	row("river", rate(res.RiverJobsPerS, "jobs/s"), "river_jobs_per_s",
		fmt.Sprintf("River, fetch cooldown %gms/poll %gms, best of jobs/s@workers per client: %s",
			res.RiverFetchCooldownMs, res.RiverFetchPollIntervalMs, strings.Join(river, ", ")))
	row("drain ÷ river", fmt.Sprintf("%.3f", res.RatioVsRiver), "ratio_vs_river", "")
	ceiling := make([]string, 0, len(res.CeilingRuns))
	for _, c := range res.CeilingRuns {
		ceiling = append(ceiling, fmt.Sprintf("%.0f@%d×%d", c.RowsPerS, c.Loops, c.Batch))
	}
	row("ceiling", rate(res.CeilingRowsPerS, "rows/s"), "ceiling_rows_per_s",
		fmt.Sprintf("bare claim + complete on a minimal table, best of rows/s@loops×batch: %s", strings.Join(ceiling, ", ")))
	row("drain ÷ ceiling", fmt.Sprintf("%.3f", res.RatioVsCeiling), "ratio_vs_ceiling", "")
}

// conditionRows writes how the drain fares under a large backlog, under
// steady load (latency) and while a snapshot is held (xmin).
func conditionRows(row tableRow, res *Result) {
	row("backlog ratio", fmt.Sprintf("%.3f", res.BacklogRatio), "backlog_ratio",
		fmt.Sprintf("first %d rows: %.0f rows/s from %d pending ÷ %.0f rows/s from %d pending",
			res.BacklogMeasuredRows, res.BacklogLargeRowsPerS, res.BacklogRows, res.BacklogSmallRowsPerS, res.BacklogSmallRows))
	row("latency p50", fmt.Sprintf("%.2f ms", res.LatencyP50Ms), "latency_p50_ms",
		fmt.Sprintf("commit → dispatch start, %d rows, %d producers offering %.0f rows/s (a tenth of the drain rate), %.2f rows per transaction",
			res.LatencySamples, res.LatencyProducers, res.LatencyOfferedRowsPerS, res.LatencyRowsPerXact))
	row("latency p90", fmt.Sprintf("%.2f ms", res.LatencyP90Ms), "latency_p90_ms", "")
	row("latency p99", fmt.Sprintf("%.2f ms", res.LatencyP99Ms), "latency_p99_ms", undispatched(res.LatencyUndispatched))
	row("latency achieved", fmt.Sprintf("%.3f", res.LatencyAchievedRatio), "latency_achieved_ratio",
		fmt.Sprintf("%.0f of %.0f rows/s offered (under 0.9: the producers were measured)", res.LatencyAchievedRowsPerS, res.LatencyOfferedRowsPerS))
	row("latency poll pickups", fmt.Sprintf("%d", res.LatencyPollPickups), "latency_poll_pickups",
		"rows of the tenth-load phase claimed by an idle replica's poll, not woken by their notification; rows by cause: "+counts(res.LatencyClaimedRows))
	row("latency p50 at half load", fmt.Sprintf("%.2f ms", res.LatencyHalfP50Ms), "latency_half_p50_ms",
		fmt.Sprintf("the same with %.0f rows/s offered (half the drain rate), %.2f rows per transaction", res.LatencyHalfOfferedRowsPerS, res.LatencyHalfRowsPerXact))
	row("latency p99 at half load", fmt.Sprintf("%.2f ms", res.LatencyHalfP99Ms), "latency_half_p99_ms", undispatched(res.LatencyHalfUndispatched))
	row("latency achieved at half load", fmt.Sprintf("%.3f", res.LatencyHalfAchievedRatio), "latency_half_achieved_ratio",
		fmt.Sprintf("%.0f of %.0f rows/s offered", res.LatencyHalfAchievedRowsPerS, res.LatencyHalfOfferedRowsPerS))
	row("dead tuples after", fmt.Sprintf("%d", res.DeadTuplesAfter), "dead_tuples_after",
		fmt.Sprintf("n_dead_tup over drainer's tables once the %d-row backlog drained, before any vacuum", res.BacklogRows))
	row("xmin ratio", fmt.Sprintf("%.3f", res.XminRatio), "xmin_ratio",
		fmt.Sprintf("%.0f rows/s with a snapshot held ÷ %.0f rows/s without, %.0fs each", res.XminRowsPerS, res.XminBaselineRowsPerS, res.XminDurationS))
}

// httpRows writes the drain through the http adapter.
func httpRows(row tableRow, res *Result) {
	row("http", rate(res.HTTPRowsPerS, "rows/s"), "http_rows_per_s",
		fmt.Sprintf("http adapter, local provider answering after %gms", res.HTTPDelayMs))
	row("http in flight", fmt.Sprintf("%d", res.HTTPInFlightMax), "http_in_flight_max", "most requests the provider saw at once")
}

// producerRows writes the enqueue figures and the plain INSERT they are
// compared with.
func producerRows(row tableRow, res *Result) {
	row("enqueue, single", rate(res.EnqueueSingleRowsPerS, "rows/s"), "enqueue_single_rows_per_s",
		fmt.Sprintf("drainer.enqueue, one row per transaction, %d connections", res.EnqueueConnections))
	notifyOff := rate(res.EnqueueSingleNotifyOffRowsPerS, "rows/s")
	if res.Quick {
		notifyOff = "-"
	}
	row("  notify off", notifyOff, "enqueue_single_notify_off_rows_per_s", "the same with SET drainer.notify = off (full runs only)")
	row("insert, single", rate(res.InsertSingleRowsPerS, "rows/s"), "insert_single_rows_per_s",
		"plain INSERT … ON CONFLICT DO NOTHING, outbox shape without triggers, same setting")
	row("enqueue ÷ insert", fmt.Sprintf("%.3f", res.EnqueueVsInsert), "enqueue_vs_insert", "")
	row("enqueue, batch", rate(res.EnqueueBatchRowsPerS, "rows/s"), "enqueue_batch_rows_per_s",
		fmt.Sprintf("producer.EnqueueBatchTx, %d rows per transaction", res.EnqueueBatchSize))
}

// gatewayRows writes the MCP gateway's overhead: a percentile through the
// gateway minus the same percentile direct.
func gatewayRows(row tableRow, res *Result) {
	row("gateway overhead p50", fmt.Sprintf("%.2f ms", res.GatewayOverheadP50Ms), "gateway_overhead_p50_ms",
		fmt.Sprintf("tools/call through the MCP gateway (recorded, dispatched, answered from its record) p50 %.2f ms − direct p50 %.2f ms; %d calls each way from %d clients",
			res.GatewayP50Ms, res.GatewayDirectP50Ms, res.GatewayCalls, res.GatewayClients))
	row("gateway overhead p99", fmt.Sprintf("%.2f ms", res.GatewayOverheadP99Ms), "gateway_overhead_p99_ms",
		fmt.Sprintf("p99 %.2f ms through the gateway − %.2f ms direct", res.GatewayP99Ms, res.GatewayDirectP99Ms))
	row("  one client, p50", fmt.Sprintf("%.2f ms", res.GatewayOneOverheadP50Ms), "gateway_one_client_overhead_p50_ms",
		fmt.Sprintf("the same from one client, one call at a time: p50 %.2f ms − %.2f ms direct; %d calls each way",
			res.GatewayOneP50Ms, res.GatewayOneDirectP50Ms, res.GatewayOneCalls))
	row("  one client, p99", fmt.Sprintf("%.2f ms", res.GatewayOneOverheadP99Ms), "gateway_one_client_overhead_p99_ms",
		fmt.Sprintf("p99 %.2f ms through the gateway − %.2f ms direct", res.GatewayOneP99Ms, res.GatewayOneDirectP99Ms))
}

// waitEventRows writes the eight most sampled wait events of the drain, if
// they were sampled.
func waitEventRows(row tableRow, res *Result) {
	if len(res.DrainWaitEvents) == 0 {
		return
	}
	total := 0
	for _, n := range res.DrainWaitEvents {
		total += n
	}
	keys := slices.SortedFunc(maps.Keys(res.DrainWaitEvents), func(a, b string) int {
		return res.DrainWaitEvents[b] - res.DrainWaitEvents[a]
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys[:min(len(keys), 8)] {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", k, 100*float64(res.DrainWaitEvents[k])/float64(total)))
	}
	row("drain wait events", fmt.Sprintf("%d samples", total), "drain_wait_events", strings.Join(parts, ", "))
}

// counts writes a count per name, largest first.
func counts(m map[string]uint64) string {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), strings.Compare(a, b)) })
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
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

// undispatched says when latency percentiles are lower bounds.
func undispatched(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("lower bounds: %d rows still undispatched 10s after the producers stopped", n)
}
