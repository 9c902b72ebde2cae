package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime/pprof"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/internal/pgtemp"
	"github.com/drainer-io/drainer/migrations"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultSchema is the drainer schema bench creates (and drops) on a
// database given by URL; River's goes in DefaultSchema + RiverSchemaSuffix.
const DefaultSchema = "drainer_bench"

// RiverSchemaSuffix is appended to Options.Schema to name River's schema.
const RiverSchemaSuffix = "_river"

// DefaultReplicas is how many engines (and River clients) run by default:
// two, the smallest deployment where claims contend.
const DefaultReplicas = 2

// Options configure Run.
type Options struct {
	// DatabaseURL names the server to measure on. Empty starts a throwaway,
	// durable cluster (fsync and synchronous_commit on, so commit costs are
	// real) and removes it afterwards.
	DatabaseURL string
	// Schema is the drainer schema bench works in (default DefaultSchema).
	Schema string
	// Workers per replica (default config.DefaultWorkers, as shipped).
	Workers int
	// Replicas is the number of engines, each with its own pool, and of River
	// clients (default DefaultReplicas).
	Replicas int
	// Quick selects sizes that finish within 3 minutes on a 2-core machine.
	Quick bool
	// Sizes overrides the sizes Quick selects; zero fields keep them.
	Sizes Sizes
	// Progress receives a line per step (default: discarded).
	Progress io.Writer
	// Version is exported by the engines' build info metric.
	Version string
	// DrainCPUProfile, when set, receives a CPU profile (pprof format) of
	// this process during the drain runs: where the engine spends its time.
	DrainCPUProfile io.Writer
}

// Sizes say how much each phase measures.
type Sizes struct {
	// WarmupRows are drained once before anything is measured.
	WarmupRows int
	// Rows is the job count of the drain, River and ceiling phases.
	Rows int
	// DrainRuns is how often the drain is measured; the best run counts.
	DrainRuns int
	// BacklogSmall and BacklogLarge are the two backlogs of backlog_ratio;
	// BacklogMeasured rows are drained from each.
	BacklogSmall, BacklogLarge, BacklogMeasured int
	// LatencyDuration is how long producers enqueue; rows committed in the
	// first LatencyWarmup are left out of the percentiles.
	LatencyDuration, LatencyWarmup time.Duration
	// RiverSettings are the River fetch settings tried; the best counts.
	RiverSettings []RiverSetting
	// CeilingSettings are the bare-loop configurations tried; the best counts.
	CeilingSettings []CeilingSetting
}

// CeilingSetting is one configuration of the bare claim/complete loops.
type CeilingSetting struct {
	// LoopsPerReplica is how many loops run per replica.
	LoopsPerReplica int
	// Batch is the rows per claim (and so per completion); 0 means the
	// engine's claim batch.
	Batch int
}

// RiverSetting is one River fetch configuration.
type RiverSetting struct {
	FetchCooldown, FetchPollInterval time.Duration
}

// riverbenchSetting is what River's own benchmark (cmd/river/riverbench)
// uses: "much better than the client's default values".
var riverbenchSetting = RiverSetting{FetchCooldown: 2 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond}

// QuickSizes finish every phase within 3 minutes on a 2-core machine.
func QuickSizes() Sizes {
	return Sizes{
		WarmupRows: 2_000, Rows: 20_000, DrainRuns: 2,
		BacklogSmall: 10_000, BacklogLarge: 100_000, BacklogMeasured: 10_000,
		LatencyDuration: 10 * time.Second, LatencyWarmup: 2 * time.Second,
		RiverSettings:   []RiverSetting{riverbenchSetting, {FetchCooldown: time.Millisecond, FetchPollInterval: 10 * time.Millisecond}},
		CeilingSettings: []CeilingSetting{{LoopsPerReplica: 2}, {LoopsPerReplica: 2, Batch: ceilingLargeBatch}},
	}
}

// FullSizes are the sizes of a full run (about 5 to 10 minutes on 2 cores,
// most of it filling the 10^6-row backlog).
func FullSizes() Sizes {
	return Sizes{
		WarmupRows: 5_000, Rows: 100_000, DrainRuns: 2,
		BacklogSmall: 10_000, BacklogLarge: 1_000_000, BacklogMeasured: 10_000,
		LatencyDuration: 30 * time.Second, LatencyWarmup: 5 * time.Second,
		RiverSettings: []RiverSetting{
			riverbenchSetting,
			{FetchCooldown: time.Millisecond, FetchPollInterval: 10 * time.Millisecond},
			{FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond},
		},
		CeilingSettings: []CeilingSetting{
			{LoopsPerReplica: 1}, {LoopsPerReplica: 2},
			{LoopsPerReplica: 1, Batch: ceilingLargeBatch}, {LoopsPerReplica: 2, Batch: ceilingLargeBatch},
		},
	}
}

// withDefaults fills zero fields of s from d.
func (s Sizes) withDefaults(d Sizes) Sizes {
	s.WarmupRows = cmp.Or(s.WarmupRows, d.WarmupRows)
	s.Rows = cmp.Or(s.Rows, d.Rows)
	s.DrainRuns = cmp.Or(s.DrainRuns, d.DrainRuns)
	s.BacklogSmall = cmp.Or(s.BacklogSmall, d.BacklogSmall)
	s.BacklogLarge = cmp.Or(s.BacklogLarge, d.BacklogLarge)
	s.BacklogMeasured = cmp.Or(s.BacklogMeasured, d.BacklogMeasured)
	s.LatencyDuration = cmp.Or(s.LatencyDuration, d.LatencyDuration)
	s.LatencyWarmup = cmp.Or(s.LatencyWarmup, d.LatencyWarmup)
	if len(s.RiverSettings) == 0 {
		s.RiverSettings = d.RiverSettings
	}
	if len(s.CeilingSettings) == 0 {
		s.CeilingSettings = d.CeilingSettings
	}
	return s
}

// validate reports every unusable size at once.
func (s Sizes) validate() error {
	var errs []error
	for _, v := range []struct {
		name string
		n    int
	}{{"warmup rows", s.WarmupRows}, {"rows", s.Rows}, {"drain runs", s.DrainRuns},
		{"small backlog", s.BacklogSmall}, {"large backlog", s.BacklogLarge}, {"measured backlog rows", s.BacklogMeasured}} {
		if v.n < 1 {
			errs = append(errs, fmt.Errorf("%s (%d) must be positive", v.name, v.n))
		}
	}
	if s.BacklogMeasured < 2 {
		errs = append(errs, fmt.Errorf("measured backlog rows (%d) must be at least 2: the rate is taken between the first and the last", s.BacklogMeasured))
	}
	if s.BacklogMeasured > s.BacklogSmall {
		errs = append(errs, fmt.Errorf("measured backlog rows (%d) must not exceed the small backlog (%d)", s.BacklogMeasured, s.BacklogSmall))
	}
	if s.BacklogLarge < s.BacklogSmall+s.BacklogMeasured {
		errs = append(errs, fmt.Errorf("large backlog (%d) must hold the small one (%d) plus the measured rows (%d): it is measured twice in a row",
			s.BacklogLarge, s.BacklogSmall, s.BacklogMeasured))
	}
	if s.LatencyWarmup < 0 || s.LatencyDuration <= s.LatencyWarmup {
		errs = append(errs, fmt.Errorf("latency duration (%s) must exceed its warm-up (%s)", s.LatencyDuration, s.LatencyWarmup))
	}
	for _, r := range s.RiverSettings {
		if r.FetchCooldown < time.Millisecond || r.FetchPollInterval < time.Millisecond {
			errs = append(errs, fmt.Errorf("river fetch cooldown and poll interval (%s, %s) must be at least 1ms", r.FetchCooldown, r.FetchPollInterval))
		}
	}
	for _, c := range s.CeilingSettings {
		if c.LoopsPerReplica < 1 || c.Batch < 0 {
			errs = append(errs, fmt.Errorf("ceiling loops per replica (%d) must be positive and its batch (%d) not negative", c.LoopsPerReplica, c.Batch))
		}
	}
	return errors.Join(errs...)
}

// Validate reports every invalid option at once, with defaults applied.
func (o Options) Validate() error {
	o = o.withDefaults()
	var errs []error
	if err := migrations.ValidateSchema(o.Schema); err != nil {
		errs = append(errs, err)
	} else if err := migrations.ValidateSchema(o.Schema + RiverSchemaSuffix); err != nil {
		errs = append(errs, fmt.Errorf("schema %q leaves no room for River's schema: %w", o.Schema, err))
	}
	if o.Workers < 1 || o.Workers > config.MaxWorkers {
		errs = append(errs, fmt.Errorf("workers (%d) must be between 1 and %d", o.Workers, config.MaxWorkers))
	}
	if o.Replicas < 1 || o.Replicas > 64 {
		errs = append(errs, fmt.Errorf("replicas (%d) must be between 1 and 64", o.Replicas))
	}
	if err := o.Sizes.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (o Options) withDefaults() Options {
	o.Schema = cmp.Or(o.Schema, DefaultSchema)
	o.Workers = cmp.Or(o.Workers, config.DefaultWorkers)
	o.Replicas = cmp.Or(o.Replicas, DefaultReplicas)
	d := FullSizes()
	if o.Quick {
		d = QuickSizes()
	}
	o.Sizes = o.Sizes.withDefaults(d)
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return o
}

// Result holds every figure of a run. The JSON names of the CONTRACT §8
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

	DrainRowsPerS float64   `json:"drain_rows_per_s"`
	DrainRuns     []float64 `json:"drain_runs_rows_per_s"`
	// DrainClaimBatchAvg is the mean rows per claim over the drain runs.
	DrainClaimBatchAvg float64 `json:"drain_claim_batch_avg"`

	RiverJobsPerS            float64    `json:"river_jobs_per_s"`
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

	LatencyP50Ms            float64 `json:"latency_p50_ms"`
	LatencyP90Ms            float64 `json:"latency_p90_ms"`
	LatencyP99Ms            float64 `json:"latency_p99_ms"`
	LatencyOfferedRowsPerS  float64 `json:"latency_offered_rows_per_s"`
	LatencyAchievedRowsPerS float64 `json:"latency_achieved_rows_per_s"`
	LatencySamples          int     `json:"latency_samples"`

	PeakRSSBytes        int64 `json:"peak_rss_bytes"`
	ProcessPeakRSSBytes int64 `json:"process_peak_rss_bytes"`
}

// RiverRun is one River measurement.
type RiverRun struct {
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

// Run measures every figure and returns them. It leaves nothing running
// and, on a database given by URL, drops the schemas it created.
func Run(ctx context.Context, opts Options) (res *Result, err error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	begin := time.Now()
	r := &runner{opts: opts, sizes: opts.Sizes, progress: opts.Progress}
	res = &Result{Quick: opts.Quick, Rows: opts.Sizes.Rows, Workers: opts.Workers, Replicas: opts.Replicas}

	url := opts.DatabaseURL
	res.Server = "server given by --database-url"
	if url == "" {
		r.logf("starting a throwaway durable Postgres cluster (fsync on)")
		c, err := pgtemp.Start(ctx, pgtemp.Options{Durable: true})
		if err != nil {
			return nil, fmt.Errorf("start throwaway Postgres (or pass --database-url): %w", err)
		}
		defer func() {
			if serr := c.Stop(); serr != nil && err == nil {
				err = serr
			}
		}()
		url = c.URL("postgres")
		res.Server = "throwaway pgtemp cluster, durable (fsync on)"
	}
	if err := r.setup(ctx, url); err != nil {
		return nil, errors.Join(err, r.close(ctx))
	}
	defer func() {
		if cerr := r.close(ctx); cerr != nil && err == nil {
			err = cerr
		}
	}()
	res.BatchSize = r.batchSize
	res.PostgresVersion = r.pgVersion
	res.Audit = r.audit
	if err := r.measure(ctx, res); err != nil {
		return nil, err
	}
	res.DurationS = round(time.Since(begin).Seconds(), 1)
	return res, nil
}

// measure runs the phases in order. The drain runs first, so peak_rss_bytes
// is read while the process has hosted nothing but the replicas.
func (r *runner) measure(ctx context.Context, res *Result) error {
	if err := r.warmup(ctx); err != nil {
		return err
	}
	if err := r.drains(ctx, res); err != nil {
		return err
	}
	rss, err := peakRSS()
	if err != nil {
		return fmt.Errorf("peak RSS: %w", err)
	}
	res.PeakRSSBytes = rss

	for _, c := range r.sizes.CeilingSettings {
		run := CeilingRun{Loops: c.LoopsPerReplica * r.opts.Replicas, Batch: cmp.Or(c.Batch, r.batchSize)}
		rate, err := r.ceiling(ctx, run.Loops, run.Batch)
		if err != nil {
			return err
		}
		run.RowsPerS = round(rate, 1)
		res.CeilingRuns = append(res.CeilingRuns, run)
		if run.RowsPerS > res.CeilingRowsPerS {
			res.CeilingRowsPerS, res.CeilingLoops, res.CeilingBatch = run.RowsPerS, run.Loops, run.Batch
		}
	}

	for _, s := range r.sizes.RiverSettings {
		rate, err := r.river(ctx, s)
		if err != nil {
			return err
		}
		run := RiverRun{FetchCooldownMs: ms(s.FetchCooldown), FetchPollIntervalMs: ms(s.FetchPollInterval), JobsPerS: round(rate, 1)}
		res.RiverRuns = append(res.RiverRuns, run)
		if run.JobsPerS > res.RiverJobsPerS {
			res.RiverJobsPerS, res.RiverFetchCooldownMs, res.RiverFetchPollIntervalMs = run.JobsPerS, run.FetchCooldownMs, run.FetchPollIntervalMs
		}
	}

	res.BacklogRows, res.BacklogSmallRows, res.BacklogMeasuredRows = r.sizes.BacklogLarge, r.sizes.BacklogSmall, r.sizes.BacklogMeasured
	small, err := r.backlog(ctx, r.sizes.BacklogSmall, true)
	if err != nil {
		return err
	}
	large, err := r.backlog(ctx, r.sizes.BacklogLarge, false)
	if err != nil {
		return err
	}
	res.BacklogSmallRowsPerS, res.BacklogLargeRowsPerS = round(small, 1), round(large, 1)

	lat, err := r.latency(ctx, res.DrainRowsPerS/2)
	if err != nil {
		return err
	}
	res.LatencyP50Ms, res.LatencyP90Ms, res.LatencyP99Ms = round(lat.p50, 2), round(lat.p90, 2), round(lat.p99, 2)
	res.LatencyOfferedRowsPerS, res.LatencyAchievedRowsPerS = round(lat.offered, 1), round(lat.achieved, 1)
	res.LatencySamples = lat.samples

	if rss, err = peakRSS(); err != nil {
		return fmt.Errorf("peak RSS: %w", err)
	}
	res.ProcessPeakRSSBytes = rss

	// Ratios from the rounded figures, so they agree with what is printed.
	var errs []error
	res.RatioVsRiver, errs = ratio(res.DrainRowsPerS, res.RiverJobsPerS, "river_jobs_per_s", errs)
	res.RatioVsCeiling, errs = ratio(res.DrainRowsPerS, res.CeilingRowsPerS, "ceiling_rows_per_s", errs)
	res.BacklogRatio, errs = ratio(res.BacklogLargeRowsPerS, res.BacklogSmallRowsPerS, "backlog_small_rows_per_s", errs)
	return errors.Join(errs...)
}

// drains measures the drain DrainRuns times, under the CPU profiler if asked.
func (r *runner) drains(ctx context.Context, res *Result) error {
	if w := r.opts.DrainCPUProfile; w != nil {
		if err := pprof.StartCPUProfile(w); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	r.registries = nil
	defer func() { r.registries = nil }()
	for i := range r.sizes.DrainRuns {
		rate, err := r.drain(ctx, i+1)
		if err != nil {
			return err
		}
		res.DrainRuns = append(res.DrainRuns, round(rate, 1))
		res.DrainRowsPerS = max(res.DrainRowsPerS, round(rate, 1))
	}
	avg, err := r.claimBatchAvg()
	if err != nil {
		return err
	}
	res.DrainClaimBatchAvg = round(avg, 1)
	return nil
}

// ratio returns a/b rounded to three decimals, or records why it cannot.
func ratio(a, b float64, name string, errs []error) (float64, []error) {
	if b <= 0 || math.IsNaN(a) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return 0, append(errs, fmt.Errorf("%s is %v: no ratio can be formed", name, b))
	}
	return round(a/b, 3), errs
}

// round rounds v to the given number of decimals.
func round(v float64, decimals int) float64 {
	p := math.Pow(10, float64(decimals))
	return math.Round(v*p) / p
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// runner holds what the phases share.
type runner struct {
	opts     Options
	sizes    Sizes
	progress io.Writer

	url          string
	admin        *pgxpool.Pool   // setup, fills, polls
	pools        []*pgxpool.Pool // one per replica, sized as `drainer run` sizes its pool
	schema       string
	riverSchema  string
	created      []string // schemas to drop at close
	external     bool
	batchSize    int
	pgVersion    string
	audit        bool
	runSeq       int  // distinguishes the tuples of successive fills
	noCheckpoint bool // CHECKPOINT was refused once; not tried again
	// registries hold the metrics of the engines started since the last
	// clear, for the claim batch sizes they observed.
	registries []*prometheus.Registry
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.progress, "bench: "+format+"\n", args...)
}
