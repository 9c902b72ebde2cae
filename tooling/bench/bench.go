package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/tooling/pgtemp"
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
	// this process during the drain runs: where the engine spends its time;
	// when Phases leaves out the drain but names the gateway, during the
	// calls through the gateway from all its clients.
	DrainCPUProfile io.Writer
	// DrainMemProfile, when set, receives the allocation profile (pprof
	// format, the runtime's "allocs") of this process at the end of the
	// same window as DrainCPUProfile, and DrainMemProfileBase the same
	// profile at its start: what the window allocated is the difference
	// (go tool pprof -sample_index=alloc_space -base BASE PROFILE).
	DrainMemProfile, DrainMemProfileBase io.Writer
	// ReplicaCommand is the command line that starts one replica process
	// for peak_rss_bytes (it must end in RunReplicaFromEnv, e.g. the drainer
	// binary's hidden `bench replica`). Empty skips the phase: peak_rss_bytes
	// is then 0 and Run says why.
	ReplicaCommand []string
	// Phases, when set, runs only the named phases (drain, no-audit,
	// ceiling, river, backlog, latency, xmin, http, enqueue, gateway, rss): for
	// measuring one change quickly; the figures of the others stay 0.
	Phases []string
	// WaitEvents samples the wait events of the drain's connections
	// (pg_stat_activity) during the drain runs and reports them. The
	// sampling costs the server a query every few milliseconds.
	WaitEvents bool
}

// Sizes say how much each phase measures.
type Sizes struct {
	// WarmupRows are drained once before anything is measured.
	WarmupRows int
	// Rows is the row (and job) count of every rate: drain, no-audit drain,
	// River, ceiling, http, enqueue and insert.
	Rows int
	// DrainRuns is how often each drain is measured; the best run counts.
	DrainRuns int
	// BacklogSmall and BacklogLarge are the two backlogs of backlog_ratio;
	// BacklogMeasured rows are drained from each.
	BacklogSmall, BacklogLarge, BacklogMeasured int
	// LatencyDuration is how long producers enqueue; rows committed in the
	// first LatencyWarmup are left out of the percentiles.
	LatencyDuration, LatencyWarmup time.Duration
	// XminDuration is how long each of the two xmin_ratio drains runs (one
	// of them while another session holds a snapshot the whole time).
	XminDuration time.Duration
	// RSSWorkers is the worker count of each replica process of the
	// peak_rss_bytes phase, whose adapter holds every row RSSHold, so that
	// about RSSWorkers rows are in flight per replica.
	RSSWorkers int
	RSSHold    time.Duration
	// GatewayCalls is how many tools/calls the gateway phase makes each
	// way (direct and through the gateway).
	GatewayCalls int
	// RiverSettings are the River configurations tried; the best counts.
	RiverSettings []RiverSetting
	// CeilingSettings are the bare-loop configurations tried; the best counts.
	CeilingSettings []CeilingSetting
}

// CeilingSetting is one configuration of the bare claim/complete loops.
type CeilingSetting struct {
	// Loops is how many loops run at once (all replicas together).
	Loops int
	// Batch is the rows per claim (and so per completion).
	Batch int
}

// RiverSetting is one River client configuration; every client (one per
// replica) runs it.
type RiverSetting struct {
	// Workers is MaxWorkers of the default queue per client; 0 means
	// drainer's worker count (Options.Workers).
	Workers                          int
	FetchCooldown, FetchPollInterval time.Duration
}

// riverbenchWorkers, riverbenchCooldown and riverbenchPoll are what River's
// own benchmark (cmd/river/riverbench/river_bench.go) runs: 2,000 workers
// in the default queue and fetch settings "much better than the client's
// default values".
const (
	riverbenchWorkers  = 2_000
	riverbenchCooldown = 2 * time.Millisecond
	riverbenchPoll     = 20 * time.Millisecond
)

// riverSettings are the two settings of docs/reference.md §8: River's own benchmark
// settings, and drainer's worker count with the same fetch settings.
func riverSettings() []RiverSetting {
	return []RiverSetting{
		{Workers: riverbenchWorkers, FetchCooldown: riverbenchCooldown, FetchPollInterval: riverbenchPoll},
		{Workers: 0, FetchCooldown: riverbenchCooldown, FetchPollInterval: riverbenchPoll},
	}
}

// ceilingSettings are the four of docs/reference.md §8: batches of 100 and 1,000
// rows, 2 and 4 loops.
func ceilingSettings() []CeilingSetting {
	return []CeilingSetting{{Loops: 2, Batch: 100}, {Loops: 4, Batch: 100}, {Loops: 2, Batch: 1000}, {Loops: 4, Batch: 1000}}
}

// QuickSizes finish every phase within 3 minutes on a 2-core machine.
func QuickSizes() Sizes {
	return Sizes{
		WarmupRows: 2_000, Rows: 20_000, DrainRuns: 2,
		BacklogSmall: 10_000, BacklogLarge: 100_000, BacklogMeasured: 10_000,
		LatencyDuration: 10 * time.Second, LatencyWarmup: 2 * time.Second,
		XminDuration: 20 * time.Second,
		RSSWorkers:   1000, RSSHold: time.Second,
		GatewayCalls:    400,
		RiverSettings:   riverSettings(),
		CeilingSettings: ceilingSettings(),
	}
}

// FullSizes are the sizes of a full run (about 10 minutes on 2 cores).
func FullSizes() Sizes {
	return Sizes{
		WarmupRows: 5_000, Rows: 100_000, DrainRuns: 2,
		BacklogSmall: 10_000, BacklogLarge: 1_000_000, BacklogMeasured: 10_000,
		LatencyDuration: 30 * time.Second, LatencyWarmup: 5 * time.Second,
		XminDuration: 60 * time.Second,
		RSSWorkers:   1000, RSSHold: time.Second,
		GatewayCalls:    1000,
		RiverSettings:   riverSettings(),
		CeilingSettings: ceilingSettings(),
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
	s.XminDuration = cmp.Or(s.XminDuration, d.XminDuration)
	s.RSSWorkers = cmp.Or(s.RSSWorkers, d.RSSWorkers)
	s.RSSHold = cmp.Or(s.RSSHold, d.RSSHold)
	s.GatewayCalls = cmp.Or(s.GatewayCalls, d.GatewayCalls)
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
		{"small backlog", s.BacklogSmall}, {"large backlog", s.BacklogLarge}, {"measured backlog rows", s.BacklogMeasured},
		{"rss workers", s.RSSWorkers}, {"gateway calls", s.GatewayCalls}} {
		if v.n < 1 {
			errs = append(errs, fmt.Errorf("%s (%d) must be positive", v.name, v.n))
		}
	}
	if s.RSSWorkers > config.MaxWorkers {
		errs = append(errs, fmt.Errorf("rss workers (%d) must not exceed %d", s.RSSWorkers, config.MaxWorkers))
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
	if s.XminDuration < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("xmin duration (%s) must be at least 100ms", s.XminDuration))
	}
	if s.RSSHold <= 0 {
		errs = append(errs, fmt.Errorf("rss hold (%s) must be positive", s.RSSHold))
	}
	for _, r := range s.RiverSettings {
		if r.Workers < 0 || r.FetchCooldown < time.Millisecond || r.FetchPollInterval < time.Millisecond {
			errs = append(errs, fmt.Errorf("river workers (%d) must not be negative, fetch cooldown and poll interval (%s, %s) at least 1ms",
				r.Workers, r.FetchCooldown, r.FetchPollInterval))
		}
	}
	for _, c := range s.CeilingSettings {
		if c.Loops < 1 || c.Batch < 1 {
			errs = append(errs, fmt.Errorf("ceiling loops (%d) and batch (%d) must be positive", c.Loops, c.Batch))
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
	for _, p := range o.Phases {
		if !slices.Contains(phaseNames, p) {
			errs = append(errs, fmt.Errorf("phase %q is not one of %s", p, strings.Join(phaseNames, ", ")))
		}
	}
	return errors.Join(errs...)
}

// phaseNames are the phases of a run, in the order they run.
var phaseNames = []string{"drain", "no-audit", "ceiling", "river", "backlog", "latency", "xmin", "http", "enqueue", "gateway", "rss"}

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

// Run measures every figure and returns them. It leaves nothing running
// and drops everything it created (on a database given by URL: its
// schemas; otherwise the whole throwaway cluster), also when ctx is
// cancelled.
func Run(ctx context.Context, opts Options) (res *Result, err error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	begin := time.Now()
	r := &runner{opts: opts, sizes: opts.Sizes, progress: &lockedWriter{w: opts.Progress}, begin: begin}
	res = &Result{Quick: opts.Quick, Rows: opts.Sizes.Rows, Workers: opts.Workers, Replicas: opts.Replicas, LoadAvgStart: loadAvg()}

	url := opts.DatabaseURL
	res.Server = "server given by --database-url"
	if url == "" {
		r.logf("starting a throwaway durable Postgres cluster (fsync on)")
		c, err := pgtemp.Start(ctx, pgtemp.Options{Durable: true, Settings: map[string]string{
			// Replica processes of the RSS phase open drainer run's pools.
			"max_connections": "400",
		}})
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
	res.LoadAvgEnd = loadAvg()
	return res, nil
}

// drains measures the drain (audit on) DrainRuns times, under the
// profilers if asked, counting the server's transactions and WAL.
func (r *runner) drains(ctx context.Context, res *Result) (err error) {
	stopProfiles, err := r.startProfiles()
	if err != nil {
		return err
	}
	defer func() {
		if perr := stopProfiles(); perr != nil && err == nil {
			err = perr
		}
	}()
	var stop func() map[string]int
	if r.opts.WaitEvents {
		stop = r.sampleWaits(ctx)
	}
	r.registries = nil
	defer func() { r.registries = nil }()
	runs, cost, err := r.drainRuns(ctx, "drain")
	if stop != nil {
		res.DrainWaitEvents = stop()
	}
	if err != nil {
		return err
	}
	res.DrainRuns = runs
	res.DrainRowsPerS = best(runs)
	res.XactsPerRow, res.WALBytesPerRow = round(cost.xactsPerRow(), 2), round(cost.walPerRow(), 0)
	avg, err := r.claimBatchAvg()
	if err != nil {
		return err
	}
	res.DrainClaimBatchAvg = round(avg, 1)
	return nil
}

// drainsNoAudit measures the same drain with the audit triggers disabled.
func (r *runner) drainsNoAudit(ctx context.Context, res *Result) (err error) {
	if err := r.setAudit(ctx, false); err != nil {
		return err
	}
	defer func() {
		if aerr := r.setAudit(context.WithoutCancel(ctx), true); err == nil {
			err = aerr
		}
	}()
	runs, cost, err := r.drainRuns(ctx, "drain without audit")
	if err != nil {
		return err
	}
	res.DrainNoAuditRuns = runs
	res.DrainNoAuditRowsPerS = best(runs)
	res.XactsPerRowNoAudit, res.WALBytesPerRowNoAudit = round(cost.xactsPerRow(), 2), round(cost.walPerRow(), 0)
	return nil
}

// drainRuns measures DrainRuns drains and what they cost the server.
func (r *runner) drainRuns(ctx context.Context, name string) ([]float64, serverCost, error) {
	var runs []float64
	var cost serverCost
	for i := range r.sizes.DrainRuns {
		rate, c, err := r.drain(ctx, name, i+1)
		if err != nil {
			return nil, cost, err
		}
		cost.add(c)
		runs = append(runs, round(rate, 1))
	}
	return runs, cost, nil
}

func best(vs []float64) float64 {
	m := 0.0
	for _, v := range vs {
		m = max(m, v)
	}
	return m
}

// loadAvg returns the 1-minute load average, or 0 where /proc/loadavg is missing.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b) + " 0")[0], 64)
	return f
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
	begin    time.Time

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

// lockedWriter serialises writes to the progress writer: the runner and
// the replica processes' stderr copiers write to it at the same time.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.progress, "bench %5.1fs: "+format+"\n", append([]any{time.Since(r.begin).Seconds()}, args...)...)
}
