package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5"
)

// TestMain runs the tests, or, started by the peak RSS phase of a test's
// Run (ReplicaCommand is this binary), one replica process.
func TestMain(m *testing.M) {
	if os.Getenv(EnvReplica) != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := RunReplicaFromEnv(ctx, os.Stdout)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	dbtest.Main(m)
}

// tinySizes run every phase in a few seconds; the figures mean nothing.
func tinySizes() Sizes {
	return Sizes{
		WarmupRows: 50, Rows: 300, DrainRuns: 1,
		BacklogSmall: 200, BacklogLarge: 500, BacklogMeasured: 100,
		LatencyDuration: 1500 * time.Millisecond, LatencyWarmup: 200 * time.Millisecond,
		XminDuration: 300 * time.Millisecond,
		RSSWorkers:   4, RSSHold: 20 * time.Millisecond,
		GatewayCalls:    40,
		RiverSettings:   []RiverSetting{{FetchCooldown: riverbenchCooldown, FetchPollInterval: riverbenchPoll}},
		CeilingSettings: []CeilingSetting{{Loops: 2, Batch: 100}},
	}
}

// contractFields are the JSON fields of docs/reference.md §8 and the brief; the
// numeric ones must be positive and finite.
var (
	numericFields = []string{
		"drain_rows_per_s", "drain_no_audit_rows_per_s", "river_jobs_per_s", "ratio_vs_river",
		"ceiling_rows_per_s", "ratio_vs_ceiling", "backlog_ratio", "backlog_rows",
		"latency_p99_ms", "latency_achieved_ratio", "xmin_ratio", "latency_half_p99_ms", "latency_half_achieved_ratio",
		"http_rows_per_s", "http_in_flight_max", "enqueue_single_rows_per_s", "insert_single_rows_per_s",
		"enqueue_batch_rows_per_s", "peak_rss_bytes", "xacts_per_row", "wal_bytes_per_row",
		"rows", "workers", "replicas", "duration_s",
		"gateway_p50_ms", "gateway_p99_ms", "gateway_direct_p50_ms", "gateway_direct_p99_ms", "gateway_calls", "gateway_clients",
		"gateway_one_client_p50_ms", "gateway_one_client_p99_ms", "gateway_one_client_direct_p50_ms",
		"gateway_one_client_direct_p99_ms", "gateway_one_client_calls",
	}
	// finiteFields may be zero or negative on tiny runs (a difference of
	// two noisy rates; a latency under the clock's resolution).
	// gateway_overhead_* are differences of two percentiles of few calls.
	finiteFields = []string{"audit_cost", "latency_p50_ms", "latency_half_p50_ms", "dead_tuples_after", "latency_poll_pickups",
		"gateway_overhead_p50_ms", "gateway_overhead_p99_ms", "gateway_one_client_overhead_p50_ms", "gateway_one_client_overhead_p99_ms"}
	otherFields = []string{"postgres_version", "quick", "audit"}
	// tableFields are the figures the table shows, by JSON name.
	tableFields = []string{
		"drain_rows_per_s", "drain_no_audit_rows_per_s", "audit_cost", "river_jobs_per_s", "ratio_vs_river",
		"ceiling_rows_per_s", "ratio_vs_ceiling", "backlog_ratio", "latency_p50_ms", "latency_p99_ms",
		"latency_achieved_ratio", "latency_half_p50_ms", "latency_half_p99_ms", "latency_half_achieved_ratio", "dead_tuples_after", "xmin_ratio", "http_rows_per_s", "http_in_flight_max",
		"enqueue_single_rows_per_s", "insert_single_rows_per_s", "enqueue_batch_rows_per_s", "peak_rss_bytes",
		"xacts_per_row", "wal_bytes_per_row", "latency_poll_pickups", "gateway_overhead_p50_ms", "gateway_overhead_p99_ms",
		"gateway_one_client_overhead_p50_ms", "gateway_one_client_overhead_p99_ms",
	}
)

// TestRunReportsEveryField runs every phase on a database that also holds a
// live drainer schema with a row: bench works beside it, in its own
// schemas, and leaves it as it was.
func TestRunReportsEveryField(t *testing.T) {
	url := dbtest.NewDatabase(t)
	liveDrainer(t, url)
	var progress, cpu, mem, memBase bytes.Buffer
	res, err := Run(t.Context(), Options{DatabaseURL: url, Workers: 4, Replicas: 2, Quick: true, Sizes: tinySizes(), Progress: &progress,
		ReplicaCommand:  []string{os.Args[0]},
		DrainCPUProfile: &cpu, DrainMemProfile: &mem, DrainMemProfileBase: &memBase})
	if err != nil {
		t.Fatalf("run: %v\nprogress:\n%s", err, progress.String())
	}
	// The profiles of the drain runs (drainer bench --cpuprofile,
	// --memprofile): pprof's gzipped protocol buffers, naming their
	// samples.
	assertProfile(t, "cpu", cpu.Bytes(), "cpu")
	assertProfile(t, "allocations", mem.Bytes(), "alloc_space")
	assertProfile(t, "allocations at the start", memBase.Bytes(), "alloc_space")

	var out bytes.Buffer
	if err := WriteJSON(&out, res); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(out.Bytes()))
	var got map[string]any
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("decode %s: %v", out.String(), err)
	}
	if dec.More() {
		t.Fatalf("more than one JSON value: %s", out.String())
	}
	for _, f := range numericFields {
		v, ok := got[f].(float64)
		if !ok || v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			t.Errorf("%s = %v (%T), want a positive finite number", f, got[f], got[f])
		}
	}
	for _, f := range finiteFields {
		v, ok := got[f].(float64)
		if !ok || math.IsInf(v, 0) || math.IsNaN(v) {
			t.Errorf("%s = %v (%T), want a finite number", f, got[f], got[f])
		}
	}
	for _, f := range otherFields {
		if _, ok := got[f]; !ok {
			t.Errorf("field %s missing from %s", f, out.String())
		}
	}
	if v, _ := got["postgres_version"].(string); v == "" {
		t.Errorf("postgres_version = %q", v)
	}
	if got["quick"] != true || got["audit"] != true {
		t.Errorf("quick = %v, audit = %v; want true, true (triggers on as shipped)", got["quick"], got["audit"])
	}
	if res.Rows != 300 || res.Workers != 4 || res.Replicas != 2 || res.BacklogRows != 500 {
		t.Errorf("rows, workers, replicas, backlog_rows = %d, %d, %d, %d; want 300, 4, 2, 500", res.Rows, res.Workers, res.Replicas, res.BacklogRows)
	}

	// Ratios agree with their parts (both rounded as reported).
	for _, c := range []struct {
		name        string
		ratio, a, b float64
	}{
		{"ratio_vs_river", res.RatioVsRiver, res.DrainRowsPerS, res.RiverJobsPerS},
		{"ratio_vs_ceiling", res.RatioVsCeiling, res.DrainRowsPerS, res.CeilingRowsPerS},
		{"backlog_ratio", res.BacklogRatio, res.BacklogLargeRowsPerS, res.BacklogSmallRowsPerS},
		{"latency_achieved_ratio", res.LatencyAchievedRatio, res.LatencyAchievedRowsPerS, res.LatencyOfferedRowsPerS},
		{"xmin_ratio", res.XminRatio, res.XminRowsPerS, res.XminBaselineRowsPerS},
		{"1 - audit_cost", 1 - res.AuditCost, res.DrainRowsPerS, res.DrainNoAuditRowsPerS},
	} {
		if math.Abs(c.ratio-c.a/c.b) > 0.0005+1e-9 {
			t.Errorf("%s = %v, want %v / %v = %v", c.name, c.ratio, c.a, c.b, c.a/c.b)
		}
	}
	// The best runs are the ones reported.
	if len(res.DrainRuns) != 1 || res.DrainRuns[0] != res.DrainRowsPerS {
		t.Errorf("drain runs %v, reported %v", res.DrainRuns, res.DrainRowsPerS)
	}
	// River with Workers 0 runs drainer's worker count.
	if len(res.RiverRuns) != 1 || res.RiverRuns[0].JobsPerS != res.RiverJobsPerS || res.RiverFetchCooldownMs != 2 || res.RiverWorkers != 4 {
		t.Errorf("river runs %+v, reported %v at %vms with %d workers", res.RiverRuns, res.RiverJobsPerS, res.RiverFetchCooldownMs, res.RiverWorkers)
	}
	if len(res.CeilingRuns) != 1 || res.CeilingRuns[0].RowsPerS != res.CeilingRowsPerS || res.CeilingLoops != 2 || res.CeilingBatch != 100 {
		t.Errorf("ceiling runs %+v, reported %v with %d loops × %d", res.CeilingRuns, res.CeilingRowsPerS, res.CeilingLoops, res.CeilingBatch)
	}
	// The http provider never saw more requests at once than there are workers.
	if res.HTTPInFlightMax < 1 || res.HTTPInFlightMax > res.Workers*res.Replicas {
		t.Errorf("http_in_flight_max = %d, want 1..%d", res.HTTPInFlightMax, res.Workers*res.Replicas)
	}
	// One peak per replica process; the largest is reported; no process
	// had more rows in flight than workers.
	if len(res.RSSReplicaBytes) != 2 || res.PeakRSSBytes != max(res.RSSReplicaBytes[0], res.RSSReplicaBytes[1]) {
		t.Errorf("peak_rss_bytes %d, replicas %v", res.PeakRSSBytes, res.RSSReplicaBytes)
	}
	if res.RSSInFlightMax < 1 || res.RSSInFlightMax > 4 {
		t.Errorf("rss_in_flight_max = %d, want 1..4 (the replica processes' workers)", res.RSSInFlightMax)
	}
	if res.EnqueueBatchSize != 100 && res.EnqueueBatchSize != 1000 {
		t.Errorf("enqueue_batch_size = %d", res.EnqueueBatchSize)
	}
	if !(res.LatencyP50Ms <= res.LatencyP90Ms && res.LatencyP90Ms <= res.LatencyP99Ms) {
		t.Errorf("latency percentiles out of order: %v %v %v", res.LatencyP50Ms, res.LatencyP90Ms, res.LatencyP99Ms)
	}
	if res.LatencySamples < 1 || res.LatencyOfferedRowsPerS != round(res.DrainRowsPerS*lightLoad, 1) {
		t.Errorf("latency: %d samples at %v rows/s offered; want a tenth of %v", res.LatencySamples, res.LatencyOfferedRowsPerS, res.DrainRowsPerS)
	}
	if !(res.LatencyHalfP50Ms <= res.LatencyHalfP90Ms && res.LatencyHalfP90Ms <= res.LatencyHalfP99Ms) ||
		res.LatencyHalfSamples < 1 || res.LatencyHalfOfferedRowsPerS != round(res.DrainRowsPerS*halfLoad, 1) {
		t.Errorf("half-load latency: %v %v %v ms, %d samples at %v rows/s offered; want ordered, at half of %v",
			res.LatencyHalfP50Ms, res.LatencyHalfP90Ms, res.LatencyHalfP99Ms, res.LatencyHalfSamples, res.LatencyHalfOfferedRowsPerS, res.DrainRowsPerS)
	}
	// Every row of the tenth-load phase was claimed, each for one cause;
	// latency_poll_pickups is the poll's share.
	var claimed uint64
	for _, n := range res.LatencyClaimedRows {
		claimed += n
	}
	if claimed < uint64(res.LatencySamples) || uint64(res.LatencyPollPickups) != res.LatencyClaimedRows["poll"] {
		t.Errorf("latency: %d rows claimed by cause %v, %d measured, %d poll pickups; want every measured row claimed, the poll's counted",
			claimed, res.LatencyClaimedRows, res.LatencySamples, res.LatencyPollPickups)
	}
	// Each overhead is the percentile through the gateway minus the same
	// percentile direct, over the calls asked for.
	if res.GatewayCalls != 40 || res.GatewayClients != gatewayClients ||
		math.Abs(res.GatewayOverheadP50Ms-(res.GatewayP50Ms-res.GatewayDirectP50Ms)) > 0.005+1e-9 ||
		math.Abs(res.GatewayOverheadP99Ms-(res.GatewayP99Ms-res.GatewayDirectP99Ms)) > 0.005+1e-9 ||
		res.GatewayP50Ms > res.GatewayP99Ms || res.GatewayDirectP50Ms > res.GatewayDirectP99Ms {
		t.Errorf("gateway: %d calls from %d clients; p50 %v − %v = %v, p99 %v − %v = %v",
			res.GatewayCalls, res.GatewayClients, res.GatewayP50Ms, res.GatewayDirectP50Ms, res.GatewayOverheadP50Ms,
			res.GatewayP99Ms, res.GatewayDirectP99Ms, res.GatewayOverheadP99Ms)
	}
	// The one-client runs: a quarter of the calls, the same differences.
	if res.GatewayOneCalls != 10 ||
		math.Abs(res.GatewayOneOverheadP50Ms-(res.GatewayOneP50Ms-res.GatewayOneDirectP50Ms)) > 0.005+1e-9 ||
		math.Abs(res.GatewayOneOverheadP99Ms-(res.GatewayOneP99Ms-res.GatewayOneDirectP99Ms)) > 0.005+1e-9 ||
		res.GatewayOneP50Ms > res.GatewayOneP99Ms || res.GatewayOneDirectP50Ms > res.GatewayOneDirectP99Ms {
		t.Errorf("gateway, one client: %d calls; p50 %v − %v = %v, p99 %v − %v = %v",
			res.GatewayOneCalls, res.GatewayOneP50Ms, res.GatewayOneDirectP50Ms, res.GatewayOneOverheadP50Ms,
			res.GatewayOneP99Ms, res.GatewayOneDirectP99Ms, res.GatewayOneOverheadP99Ms)
	}
	if res.DeadTuplesAfter < 0 {
		t.Errorf("dead_tuples_after = %d", res.DeadTuplesAfter)
	}

	// The table names every figure.
	var table bytes.Buffer
	if err := WriteTable(&table, res); err != nil {
		t.Fatal(err)
	}
	for _, f := range tableFields {
		if !strings.Contains(table.String(), f) {
			t.Errorf("table lacks %s:\n%s", f, table.String())
		}
	}

	// Nothing is left behind on the server.
	conn := connect(t, url)
	var left int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_namespace WHERE nspname IN ($1, $2)",
		DefaultSchema, DefaultSchema+RiverSchemaSuffix).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d bench schemas left on the server", left)
	}
	assertLiveDrainerIntact(t, conn)
}

// assertProfile checks that b is a profile in pprof's format (a gzipped
// protocol buffer) whose string table names sampleType.
func assertProfile(t *testing.T, name string, b []byte, sampleType string) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Errorf("%s profile (%d bytes): %v", name, len(b), err)
		return
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Errorf("%s profile: %v", name, err)
		return
	}
	if !bytes.Contains(raw, []byte(sampleType)) {
		t.Errorf("%s profile (%d bytes) does not name %q samples", name, len(raw), sampleType)
	}
}

// liveDrainer migrates the default drainer schema on url and enqueues one row.
func liveDrainer(t *testing.T, url string) {
	t.Helper()
	conn := connect(t, url)
	if _, err := migrations.Migrate(t.Context(), conn, migrations.DefaultSchema, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), `SELECT drainer.enqueue('live-run', 'step-1', 'charge_card', '', '{"amount": 1}')`); err != nil {
		t.Fatal(err)
	}
}

// assertLiveDrainerIntact checks that the row liveDrainer enqueued is still
// there, pending, untouched.
func assertLiveDrainerIntact(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	var n int
	var status string
	var attempts int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) OVER (), status, attempts FROM drainer.outbox").Scan(&n, &status, &attempts); err != nil {
		t.Fatalf("live drainer outbox: %v", err)
	}
	if n != 1 || status != "pending" || attempts != 0 {
		t.Errorf("live drainer outbox: %d rows, status %s, %d attempts; want the one pending, unattempted row", n, status, attempts)
	}
}

// TestRunRefusesLiveDrainerSchema: pointed at a live drainer schema whose
// outbox has rows, bench refuses before writing anything.
func TestRunRefusesLiveDrainerSchema(t *testing.T) {
	url := dbtest.NewDatabase(t)
	liveDrainer(t, url)
	_, err := Run(t.Context(), Options{DatabaseURL: url, Schema: migrations.DefaultSchema, Sizes: tinySizes()})
	if err == nil || !strings.Contains(err.Error(), "schema drainer exists and was not created by drainer bench") {
		t.Fatalf("run on the live drainer schema: err = %v", err)
	}
	conn := connect(t, url)
	assertLiveDrainerIntact(t, conn)
	var left int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_namespace WHERE nspname = $1", "drainer"+RiverSchemaSuffix).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("refused run left schema drainer%s behind", RiverSchemaSuffix)
	}
}

func TestRunRefusesSchemaItDidNotCreate(t *testing.T) {
	url := dbtest.NewDatabase(t)
	conn := connect(t, url)
	if _, err := conn.Exec(t.Context(), "CREATE SCHEMA mine; CREATE TABLE mine.precious (x int)"); err != nil {
		t.Fatal(err)
	}
	_, err := Run(t.Context(), Options{DatabaseURL: url, Schema: "mine", Sizes: tinySizes()})
	if err == nil || !strings.Contains(err.Error(), "schema mine exists and was not created by drainer bench") {
		t.Fatalf("run on a foreign schema: err = %v", err)
	}
	var n int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM mine.precious").Scan(&n); err != nil {
		t.Fatalf("foreign schema damaged: %v", err)
	}
}

func TestFillWritesEnqueueKeysAndHashes(t *testing.T) {
	url := dbtest.NewDatabase(t)
	opts := Options{DatabaseURL: url, Replicas: 1, Sizes: tinySizes()}.withDefaults()
	r := &runner{opts: opts, sizes: opts.Sizes, progress: opts.Progress}
	t.Cleanup(func() {
		if err := r.close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if err := r.setup(t.Context(), url); err != nil {
		t.Fatal(err)
	}
	if err := r.fill(t.Context(), 250); err != nil {
		t.Fatal(err)
	}
	var total, wrong, audited, unsized int
	err := r.admin.QueryRow(t.Context(), `SELECT count(*),
	        count(*) FILTER (WHERE key <> drainer_bench.idempotency_key(agent_run_id, step_id, tool_name, business_scope)
	                            OR payload_hash <> drainer_bench.payload_hash(payload) OR status <> 'pending'),
	        (SELECT count(*) FROM drainer_bench.audit WHERE event = 'enqueued'),
	        (SELECT count(*) FROM drainer_bench.queue q JOIN drainer_bench.intents i ON i.seq = q.seq
	          WHERE q.payload_bytes IS DISTINCT FROM pg_column_size(i.payload))
	   FROM drainer_bench.outbox`).Scan(&total, &wrong, &audited, &unsized)
	if err != nil {
		t.Fatal(err)
	}
	if total != 250 || wrong != 0 || audited != 250 {
		t.Fatalf("fill: %d rows, %d with a key or hash drainer.enqueue would not give, %d audited; want 250, 0, 250", total, wrong, audited)
	}
	// The payload's size, as the enqueue records it on the queue row (a
	// claim looks up the size of a row without one in its intent).
	if unsized != 0 {
		t.Fatalf("fill: %d queue rows without their payload's size as drainer.enqueue records it", unsized)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
		want string
	}{
		{"workers", Options{Workers: -1}, "workers (-1)"},
		{"replicas", Options{Replicas: 65}, "replicas (65)"},
		{"schema", Options{Schema: "Bad-Name"}, "invalid schema name"},
		{"river schema room", Options{Schema: strings.Repeat("s", 60)}, "no room for River's schema"},
		{"backlog", Options{Sizes: Sizes{BacklogSmall: 10, BacklogLarge: 15, BacklogMeasured: 10}}, "large backlog (15)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.opts.Validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, c.want)
			}
		})
	}
	if err := (Options{Quick: true}).Validate(); err != nil {
		t.Fatalf("quick defaults: %v", err)
	}
	if err := (Options{}).Validate(); err != nil {
		t.Fatalf("full defaults: %v", err)
	}
}

func TestPercentile(t *testing.T) {
	vs := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for p, want := range map[float64]float64{50: 5, 90: 9, 99: 10, 1: 1} {
		if got := percentile(vs, p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}
