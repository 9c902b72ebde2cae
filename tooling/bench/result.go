package bench

// Result holds every figure of a run. The JSON names of the docs/reference.md §8
// fields are fixed; the others describe how they were measured.
type Result struct {
	Quick           bool    `json:"quick"`
	Rows            int     `json:"rows"`
	Workers         int     `json:"workers"`
	Replicas        int     `json:"replicas"`
	BatchSize       int     `json:"batch_size"`
	PostgresVersion string  `json:"postgres_version"`
	Server          string  `json:"server"`
	Audit           bool    `json:"audit"`
	DurationS       float64 `json:"duration_s"`
	// LoadAvgStart and LoadAvgEnd are the machine's 1-minute load average
	// (/proc/loadavg) when the run started and ended: other work on the
	// machine depresses every figure.
	LoadAvgStart float64 `json:"load_avg_start"`
	LoadAvgEnd   float64 `json:"load_avg_end"`

	DrainRowsPerS float64   `json:"drain_rows_per_s"`
	DrainRuns     []float64 `json:"drain_runs_rows_per_s"`
	// DrainClaimBatchAvg is the mean rows per claim over the drain runs.
	DrainClaimBatchAvg float64 `json:"drain_claim_batch_avg"`
	// XactsPerRow and WALBytesPerRow are the server's committed
	// transactions (pg_stat_database.xact_commit) and WAL bytes
	// (pg_current_wal_lsn) per drained row over the drain runs, audit on.
	XactsPerRow    float64 `json:"xacts_per_row"`
	WALBytesPerRow float64 `json:"wal_bytes_per_row"`
	// DrainWaitEvents counts the sampled states of the replicas'
	// connections during the drain runs ("CPU" for an active connection
	// without a wait event); only with Options.WaitEvents.
	DrainWaitEvents map[string]int `json:"drain_wait_events,omitempty"`

	DrainNoAuditRowsPerS  float64   `json:"drain_no_audit_rows_per_s"`
	DrainNoAuditRuns      []float64 `json:"drain_no_audit_runs_rows_per_s"`
	XactsPerRowNoAudit    float64   `json:"xacts_per_row_no_audit"`
	WALBytesPerRowNoAudit float64   `json:"wal_bytes_per_row_no_audit"`
	AuditCost             float64   `json:"audit_cost"`

	RiverJobsPerS            float64    `json:"river_jobs_per_s"`
	RiverWorkers             int        `json:"river_workers"`
	RiverFetchCooldownMs     float64    `json:"river_fetch_cooldown_ms"`
	RiverFetchPollIntervalMs float64    `json:"river_fetch_poll_interval_ms"`
	RiverRuns                []RiverRun `json:"river_runs"`
	RatioVsRiver             float64    `json:"ratio_vs_river"`

	CeilingRowsPerS float64      `json:"ceiling_rows_per_s"`
	CeilingLoops    int          `json:"ceiling_loops"`
	CeilingBatch    int          `json:"ceiling_batch"`
	CeilingRuns     []CeilingRun `json:"ceiling_runs"`
	RatioVsCeiling  float64      `json:"ratio_vs_ceiling"`

	BacklogRows          int     `json:"backlog_rows"`
	BacklogSmallRows     int     `json:"backlog_small_rows"`
	BacklogMeasuredRows  int     `json:"backlog_measured_rows"`
	BacklogSmallRowsPerS float64 `json:"backlog_small_rows_per_s"`
	BacklogLargeRowsPerS float64 `json:"backlog_large_rows_per_s"`
	BacklogRatio         float64 `json:"backlog_ratio"`

	// The latency with producers offering a tenth of the drain rate
	// (docs/reference.md §8): the wake-up path at a load the machine
	// carries with room to spare.
	LatencyP50Ms            float64 `json:"latency_p50_ms"`
	LatencyP90Ms            float64 `json:"latency_p90_ms"`
	LatencyP99Ms            float64 `json:"latency_p99_ms"`
	LatencyOfferedRowsPerS  float64 `json:"latency_offered_rows_per_s"`
	LatencyAchievedRowsPerS float64 `json:"latency_achieved_rows_per_s"`
	LatencyAchievedRatio    float64 `json:"latency_achieved_ratio"`
	LatencyProducers        int     `json:"latency_producers"`
	LatencyRowsPerXact      float64 `json:"latency_rows_per_xact"`
	LatencySamples          int     `json:"latency_samples"`
	// LatencyUndispatched counts the measured rows not dispatched 10 s
	// after the producers stopped; when positive, the percentiles are
	// lower bounds.
	LatencyUndispatched int `json:"latency_undispatched_rows"`
	// LatencyPollPickups counts the rows of the phase the engines claimed
	// because an idle replica's poll timer fired, not because their
	// notification (or a freed worker slot, or the wake gate's re-arming)
	// woke it: the rows the wake-up missed (drainer.Engine.ClaimedRows).
	LatencyPollPickups int `json:"latency_poll_pickups"`
	// LatencyClaimedRows counts the rows of the phase by why their claim
	// ran (drainer.Engine.ClaimedRows).
	LatencyClaimedRows map[string]uint64 `json:"latency_claimed_rows_by_cause"`
	// The same measure with producers offering half the drain rate: on a
	// machine whose cores the producers share with the drain, mostly
	// queueing.
	LatencyHalfP50Ms            float64 `json:"latency_half_p50_ms"`
	LatencyHalfP90Ms            float64 `json:"latency_half_p90_ms"`
	LatencyHalfP99Ms            float64 `json:"latency_half_p99_ms"`
	LatencyHalfOfferedRowsPerS  float64 `json:"latency_half_offered_rows_per_s"`
	LatencyHalfAchievedRowsPerS float64 `json:"latency_half_achieved_rows_per_s"`
	LatencyHalfAchievedRatio    float64 `json:"latency_half_achieved_ratio"`
	LatencyHalfRowsPerXact      float64 `json:"latency_half_rows_per_xact"`
	LatencyHalfSamples          int     `json:"latency_half_samples"`
	LatencyHalfUndispatched     int     `json:"latency_half_undispatched_rows"`
	LatencyHalfPollPickups      int     `json:"latency_half_poll_pickups"`

	// DeadTuplesAfter is n_dead_tup summed over the tables of drainer's
	// schema right after the large backlog has drained to empty, before
	// any vacuum the bench triggers.
	DeadTuplesAfter int64 `json:"dead_tuples_after"`

	XminRatio            float64 `json:"xmin_ratio"`
	XminRowsPerS         float64 `json:"xmin_rows_per_s"`
	XminBaselineRowsPerS float64 `json:"xmin_baseline_rows_per_s"`
	XminDurationS        float64 `json:"xmin_duration_s"`

	HTTPRowsPerS    float64 `json:"http_rows_per_s"`
	HTTPInFlightMax int     `json:"http_in_flight_max"`
	HTTPDelayMs     float64 `json:"http_delay_ms"`

	EnqueueSingleRowsPerS float64 `json:"enqueue_single_rows_per_s"`
	// EnqueueSingleNotifyOffRowsPerS is enqueue_single_rows_per_s with SET
	// drainer.notify = off (not measured with Quick: 0).
	EnqueueSingleNotifyOffRowsPerS float64 `json:"enqueue_single_notify_off_rows_per_s"`
	InsertSingleRowsPerS           float64 `json:"insert_single_rows_per_s"`
	EnqueueVsInsert                float64 `json:"enqueue_vs_insert"`
	EnqueueBatchRowsPerS           float64 `json:"enqueue_batch_rows_per_s"`
	EnqueueBatchSize               int     `json:"enqueue_batch_size"`
	EnqueueConnections             int     `json:"enqueue_connections"`

	// GatewayOverheadP50Ms and GatewayOverheadP99Ms are a percentile of a
	// tools/call through the MCP gateway (GatewayP50Ms, GatewayP99Ms) minus
	// the same percentile of the call made to the tool server directly
	// (GatewayDirectP50Ms, GatewayDirectP99Ms), over GatewayCalls calls
	// from GatewayClients clients each way.
	GatewayOverheadP50Ms float64 `json:"gateway_overhead_p50_ms"`
	GatewayOverheadP99Ms float64 `json:"gateway_overhead_p99_ms"`
	GatewayP50Ms         float64 `json:"gateway_p50_ms"`
	GatewayP99Ms         float64 `json:"gateway_p99_ms"`
	GatewayDirectP50Ms   float64 `json:"gateway_direct_p50_ms"`
	GatewayDirectP99Ms   float64 `json:"gateway_direct_p99_ms"`
	GatewayCalls         int     `json:"gateway_calls"`
	GatewayClients       int     `json:"gateway_clients"`
	// GatewayOne* are the same measure from one client, one call at a
	// time (GatewayOneCalls each way): the latency a recorded call adds
	// when calls do not queue for the machine's cores.
	GatewayOneOverheadP50Ms float64 `json:"gateway_one_client_overhead_p50_ms"`
	GatewayOneOverheadP99Ms float64 `json:"gateway_one_client_overhead_p99_ms"`
	GatewayOneP50Ms         float64 `json:"gateway_one_client_p50_ms"`
	GatewayOneP99Ms         float64 `json:"gateway_one_client_p99_ms"`
	GatewayOneDirectP50Ms   float64 `json:"gateway_one_client_direct_p50_ms"`
	GatewayOneDirectP99Ms   float64 `json:"gateway_one_client_direct_p99_ms"`
	GatewayOneCalls         int     `json:"gateway_one_client_calls"`

	PeakRSSBytes    int64   `json:"peak_rss_bytes"`
	RSSReplicaBytes []int64 `json:"rss_replica_bytes"`
	RSSWorkers      int     `json:"rss_workers"`
	RSSInFlightMax  int     `json:"rss_in_flight_max"`
}

// RiverRun is one River measurement.
type RiverRun struct {
	Workers             int     `json:"workers"`
	FetchCooldownMs     float64 `json:"fetch_cooldown_ms"`
	FetchPollIntervalMs float64 `json:"fetch_poll_interval_ms"`
	JobsPerS            float64 `json:"jobs_per_s"`
}

// CeilingRun is one bare-loop measurement.
type CeilingRun struct {
	Loops    int     `json:"loops"`
	Batch    int     `json:"batch"`
	RowsPerS float64 `json:"rows_per_s"`
}
