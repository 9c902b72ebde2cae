package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/builtin"
	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/internal/daemon"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// benchConfig is the config file the engines run: one adapter and one
// route, every other value the shipped default the config package applies.
// The adapter's URL is never called: the registry holds the no-op adapter
// under its name.
const benchConfig = `# drainer bench: shipped defaults, one no-op adapter.
adapters:
  noop:
    type: http
    url: http://127.0.0.1:9/{tool_name}
routes:
  ` + benchTool + `:
    adapter: noop
`

// probe is the no-op adapter's bookkeeping: it counts calls, notes the
// first and the target-th, and optionally when each key was first called.
type probe struct {
	target  int64
	calls   atomic.Int64
	firstNs atomic.Int64
	lastNs  atomic.Int64
	reached chan struct{}
	keys    *sync.Map // key → time.Time of its first dispatch; nil: not recorded
}

func newProbe(target int, recordKeys bool) *probe {
	p := &probe{target: int64(target), reached: make(chan struct{})}
	if recordKeys {
		p.keys = &sync.Map{}
	}
	return p
}

// adapter returns the no-op adapter: it answers Success at once.
func (p *probe) adapter() dispatch.Adapter {
	return dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		now := time.Now()
		if p.keys != nil {
			p.keys.LoadOrStore(m.Key, now)
		}
		n := p.calls.Add(1)
		if n == 1 {
			p.firstNs.Store(now.UnixNano())
		}
		if n == p.target {
			p.lastNs.Store(now.UnixNano())
			close(p.reached)
		}
		return dispatch.Result{Outcome: dispatch.Success}
	})
}

// routing builds the engines' routing from benchConfig around adapter.
func routing(adapter dispatch.Adapter) (*drainer.Routing, *config.Config, error) {
	cfg, err := config.Parse("bench.yaml", []byte(benchConfig), config.LoadOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("bench config: %w", err)
	}
	a := cfg.Adapters["noop"]
	reg, err := dispatch.NewRegistry(&dispatch.Entry{
		Name: "noop", Type: "noop", Adapter: adapter, Timeout: a.Timeout, KeyTTL: builtin.DefaultKeyTTL[a.Type],
	})
	if err != nil {
		return nil, nil, err
	}
	return daemon.NewRouting(cfg, reg), cfg, nil
}

// engines are the replicas of one phase.
type engines []*drainer.Engine

// routingFunc builds one replica's routing and the config it came from.
type routingFunc func() (*drainer.Routing, *config.Config, error)

// noopRouting is the routing of the no-op adapter.
func noopRouting(adapter dispatch.Adapter) routingFunc {
	return func() (*drainer.Routing, *config.Config, error) { return routing(adapter) }
}

// startEngines starts one engine per replica pool around the no-op
// adapter, each configured as `drainer run` configures it from the shipped
// defaults.
func (r *runner) startEngines(ctx context.Context, adapter dispatch.Adapter) (engines, error) {
	return r.startEnginesWith(ctx, noopRouting(adapter))
}

// startEnginesWith starts one engine per replica pool with the routing mk builds.
func (r *runner) startEnginesWith(ctx context.Context, mk routingFunc) (engines, error) {
	var es engines
	for i, pool := range r.pools {
		rt, cfg, err := mk()
		if err != nil {
			return nil, errors.Join(err, es.stop())
		}
		reg := prometheus.NewRegistry()
		e, err := drainer.New(pool, rt, drainer.Config{
			Schema:    r.schema,
			ReplicaID: fmt.Sprintf("bench-%d", i+1),
			Workers:   r.opts.Workers,
			Lease:     cfg.Lease,
			Metrics:   drainer.NewMetrics(reg, r.opts.Version),
		})
		if err == nil {
			err = e.Start(ctx)
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("start engine: %w", err), es.stop())
		}
		es = append(es, e)
		r.registries = append(r.registries, reg)
	}
	return es, nil
}

// claimBatchAvg returns the mean rows per claim of the engines started
// since the registries were last cleared, from drainer_claim_batch_size.
func (r *runner) claimBatchAvg() (float64, error) {
	var sum float64
	var count uint64
	for _, reg := range r.registries {
		mfs, err := reg.Gather()
		if err != nil {
			return 0, fmt.Errorf("gather engine metrics: %w", err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "drainer_claim_batch_size" {
				continue
			}
			for _, m := range mf.GetMetric() {
				sum += m.GetHistogram().GetSampleSum()
				count += m.GetHistogram().GetSampleCount()
			}
		}
	}
	if count == 0 {
		return 0, nil
	}
	return sum / float64(count), nil
}

// stop stops every engine, waiting up to a minute for attempts under way.
func (es engines) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// All at once: while one engine stopped (a few hundred milliseconds),
	// the others went on claiming, and drained a small backlog that a
	// phase meant to measure again (backlog).
	errs := make([]error, len(es))
	var wg sync.WaitGroup
	for i, e := range es {
		wg.Go(func() {
			if err := e.Stop(ctx); err != nil {
				errs[i] = fmt.Errorf("stop engine: %w", err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// warmup drains a small backlog once, unmeasured: connections, caches,
// prepared statements and the Go runtime are warm when measuring starts.
func (r *runner) warmup(ctx context.Context) error {
	r.logf("warm-up: draining %d rows (not measured)", r.sizes.WarmupRows)
	_, err := r.drainAll(ctx, r.sizes.WarmupRows)
	return err
}

// drain measures one drain of Rows rows: from engine start until every row
// is succeeded in the database, and what it cost the server. The replica
// pools are opened fresh and closed after, so every transaction of the
// drain is counted (a backend reports its statistics when it exits).
func (r *runner) drain(ctx context.Context, name string, run int) (float64, serverCost, error) {
	n := r.sizes.Rows
	if err := r.fill(ctx, n); err != nil {
		return 0, serverCost{}, err
	}
	if err := r.closePools(ctx); err != nil {
		return 0, serverCost{}, err
	}
	m, err := r.mark(ctx)
	if err != nil {
		return 0, serverCost{}, err
	}
	if err := r.openPools(ctx); err != nil {
		return 0, serverCost{}, err
	}
	elapsed, err := r.drainFilled(ctx, n)
	if err != nil {
		return 0, serverCost{}, err
	}
	if err := r.closePools(ctx); err != nil {
		return 0, serverCost{}, err
	}
	cost, err := r.since(ctx, m, n)
	if err != nil {
		return 0, serverCost{}, err
	}
	if err := r.openPools(ctx); err != nil {
		return 0, serverCost{}, err
	}
	rate := float64(n) / elapsed.Seconds()
	r.logf("%s %d/%d: %d rows in %s = %.0f rows/s (%d replicas × %d workers, no-op adapter); %.2f xacts, %.0f WAL bytes per row",
		name, run, r.sizes.DrainRuns, n, elapsed.Round(time.Millisecond), rate, r.opts.Replicas, r.opts.Workers,
		cost.xactsPerRow(), cost.walPerRow())
	return rate, cost, nil
}

// drainAll fills n rows and returns how long the engines took from start
// until all n are succeeded.
func (r *runner) drainAll(ctx context.Context, n int) (time.Duration, error) {
	if err := r.fill(ctx, n); err != nil {
		return 0, err
	}
	return r.drainFilled(ctx, n)
}

// drainFilled drains the n rows of a filled outbox with the no-op adapter.
func (r *runner) drainFilled(ctx context.Context, n int) (time.Duration, error) {
	p := newProbe(n, false)
	begin := time.Now()
	es, err := r.startEngines(ctx, p.adapter())
	if err != nil {
		return 0, err
	}
	err = r.awaitSucceeded(ctx, p.reached, p.calls.Load, n)
	if err != nil {
		err = fmt.Errorf("%w (%s)", err, r.stuckState(ctx, es))
	}
	elapsed := time.Since(begin)
	if serr := es.stop(); err == nil {
		err = serr
	}
	return elapsed, err
}

// awaitSucceeded waits until reached is closed (the adapter saw n calls,
// known without touching the database), then until no row is left pending
// or in flight.
func (r *runner) awaitSucceeded(ctx context.Context, reached <-chan struct{}, calls func() int64, n int) error {
	ctx, cancel := context.WithTimeout(ctx, r.phaseTimeout(n))
	defer cancel()
	select {
	case <-reached:
	case <-ctx.Done():
		return fmt.Errorf("drain: %d of %d rows dispatched before giving up: %w", calls(), n, ctx.Err())
	}
	var left int
	err := waitFor(ctx, 2*time.Millisecond, func() (bool, error) {
		var err error
		left, err = r.store().CountInStatus(ctx, r.admin, outbox.StatusPending, outbox.StatusInFlight)
		return left == 0, err
	})
	if err != nil {
		return fmt.Errorf("drain: %d rows not yet succeeded: %w", left, err)
	}
	succeeded, err := r.store().CountInStatus(ctx, r.admin, outbox.StatusSucceeded)
	if err != nil {
		return fmt.Errorf("drain: count succeeded: %w", err)
	}
	if succeeded != n {
		return fmt.Errorf("drain: %d of %d rows succeeded; the adapter answers only success", succeeded, n)
	}
	return nil
}

// stuckState says, for a phase that gave up, where its rows and engines
// stand: the rows by status (and how many pending rows are due), each
// engine's claimed rows by cause, and the schema's sessions that wait.
func (r *runner) stuckState(ctx context.Context, es engines) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var rows, waits string
	if err := r.admin.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(string_agg(status || ' ' || n, ', ' ORDER BY status), 'none')
	      || '; due now ' || (SELECT count(*) FROM %[1]s.outbox WHERE status = %[2]s AND next_attempt_at <= now())
	    FROM (SELECT status, count(*) AS n FROM %[1]s.outbox GROUP BY status) s`, pgx.Identifier{r.schema}.Sanitize(), outbox.StatusPending.SQL())).Scan(&rows); err != nil {
		rows = "rows unknown: " + err.Error()
	}
	if err := r.admin.QueryRow(ctx, `SELECT coalesce(string_agg(coalesce(application_name, '') || ' ' || wait_event_type || ':' || wait_event
	      || ' ' || left(query, 60), '; '), 'none')
	    FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type IN ('Lock', 'IO', 'LWLock')`).Scan(&waits); err != nil {
		waits = "waits unknown: " + err.Error()
	}
	claims := make([]string, len(es))
	for i, e := range es {
		claims[i] = fmt.Sprint(e.ClaimedRows())
	}
	return fmt.Sprintf("rows: %s; claims by engine: %s; sessions waiting: %s", rows, strings.Join(claims, " "), waits)
}

// phaseTimeout bounds a phase of n rows generously (100 rows/s), so a
// stuck run fails instead of hanging.
func (r *runner) phaseTimeout(n int) time.Duration {
	return time.Minute + time.Duration(n)*10*time.Millisecond
}

// backlogRuns is how often each backlog is measured; the best run counts.
const backlogRuns = 2

// backlog returns the best dispatch rate over the first BacklogMeasured rows
// of a backlog of n rows. The small backlog is refilled for each run; the
// large one is filled once and measured twice in a row (the second time
// with about n-BacklogMeasured rows pending, the same order of magnitude;
// filled again if fewer than half of n are left).
func (r *runner) backlog(ctx context.Context, n int, refill bool) (float64, error) {
	best := 0.0
	for i := range backlogRuns {
		fill := i == 0 || refill
		if !fill {
			// The engines of the run before went on past its measured
			// rows until they stopped (their calls under way, a claim):
			// a handful of batches, but at small sizes that can be what
			// is left.
			left, err := r.store().CountInStatus(ctx, r.admin, outbox.StatusPending)
			if err != nil {
				return 0, fmt.Errorf("backlog of %d: count pending rows: %w", n, err)
			}
			if fill = left < n/2; fill {
				r.logf("backlog: %d of %d rows left after run %d, under half: filling again", left, n, i)
			}
		}
		if fill {
			r.logf("backlog: filling %d rows", n)
			if err := r.fill(ctx, n); err != nil {
				return 0, err
			}
		}
		rate, err := r.backlogRun(ctx, n)
		if err != nil {
			return 0, err
		}
		r.logf("backlog of %d (run %d/%d): first %d rows dispatched at %.0f rows/s", n, i+1, backlogRuns, r.sizes.BacklogMeasured, rate)
		best = max(best, rate)
	}
	return best, nil
}

// backlogRun starts the engines on a filled backlog and returns the
// dispatch rate from the first dispatch to the BacklogMeasured-th.
func (r *runner) backlogRun(ctx context.Context, n int) (float64, error) {
	measured := r.sizes.BacklogMeasured
	p := newProbe(measured, false)
	es, err := r.startEngines(ctx, p.adapter())
	if err != nil {
		return 0, err
	}
	tctx, cancel := context.WithTimeout(ctx, r.phaseTimeout(measured))
	defer cancel()
	select {
	case <-p.reached:
	case <-tctx.Done():
		err = fmt.Errorf("backlog of %d: %d of %d rows dispatched before giving up: %w (%s)", n, p.calls.Load(), measured, tctx.Err(), r.stuckState(ctx, es))
	}
	if serr := es.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return 0, err
	}
	span := time.Duration(p.lastNs.Load() - p.firstNs.Load())
	if span <= 0 {
		return 0, fmt.Errorf("backlog of %d: %d rows dispatched in no measurable time", n, measured)
	}
	return float64(measured-1) / span.Seconds(), nil
}

// deadTuplesAfterDrain drains what is left of a filled backlog of n rows,
// lets the engines rotate the queue's generations until the drained one
// is truncated (rotate_queue: its settled rows moved out, its dead row
// versions gone with it), closes the replica pools (a backend reports its
// table statistics when it exits) and returns n_dead_tup summed over the
// tables of drainer's schema (not the ceiling's bare table, which bench
// keeps in the same scratch schema). The fill settled the tables with VACUUM, so
// the figure is what the drain and the rotation left behind.
//
// A table with no storage holds no row version, dead or alive, whatever
// its statistics say: a truncated generation's n_dead_tup is reset by the
// truncation, but a backend that updated its rows before and reports its
// counts later (they are sent at most once a second, or on exit) adds them
// back to the empty table. Such a count is left out (seen in 2 of 3 quick
// runs: 14,500–27,000 dead tuples counted on a generation of 0 bytes).
func (r *runner) deadTuplesAfterDrain(ctx context.Context, n int) (int64, error) {
	left, err := r.store().CountInStatus(ctx, r.admin, outbox.StatusPending)
	if err != nil {
		return 0, fmt.Errorf("dead tuples: count pending rows: %w", err)
	}
	if left > 0 {
		r.logf("backlog: draining the %d rows left", left)
	}
	p := newProbe(left, false)
	es, err := r.startEngines(ctx, p.adapter())
	if err != nil {
		return 0, err
	}
	if left > 0 {
		err = r.awaitSucceeded(ctx, p.reached, p.calls.Load, n)
	}
	if err == nil {
		err = r.awaitRotated(ctx)
	}
	if serr := es.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return 0, fmt.Errorf("dead tuples: %w", err)
	}
	if err := r.closePools(ctx); err != nil {
		return 0, err
	}
	var dead int64
	var where string
	err = r.admin.QueryRow(ctx, `SELECT coalesce(sum(t.dead), 0)::bigint,
	         coalesce(string_agg(t.relname || ' ' || t.dead, ', ' ORDER BY t.dead DESC) FILTER (WHERE t.dead > 0), 'none')
	    FROM (SELECT relname, CASE WHEN pg_relation_size(relid) = 0 THEN 0 ELSE n_dead_tup END AS dead
	            FROM pg_stat_user_tables WHERE schemaname = $1 AND relname <> $2) t`,
		r.schema, ceilingTable).Scan(&dead, &where)
	if err != nil {
		return 0, fmt.Errorf("dead tuples: %w", err)
	}
	r.logf("backlog of %d drained: %d dead tuples in schema %s (%s)", n, dead, r.schema, where)
	return dead, r.openPools(ctx)
}

// awaitRotated waits until the engines' rotation has nothing more to do
// by its own rules (store.DefaultRotation, as the engines run it:
// store.RotationSettled). It gives up after rotateWait.
func (r *runner) awaitRotated(ctx context.Context) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, rotateWait)
	defer cancel()
	st, err := store.New(r.schema)
	if err != nil {
		return err
	}
	for {
		done, err := st.RotationSettled(ctx, r.admin, store.DefaultRotation)
		if err != nil {
			return fmt.Errorf("rotation: %w", err)
		}
		if done {
			r.logf("backlog: the rotation settled %.1f s after the drain", time.Since(start).Seconds())
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rotation: the drained generation was not truncated within %s", rotateWait)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// rotateWait bounds awaitRotated: a flip waits for the statistics (about a
// second), then moves of some hundreds of rows (about 5 ms each) run one
// after another, each followed by a pause as long as itself, every
// RotateInterval (5 s).
const rotateWait = 3 * time.Minute

// store is the store of the bench's schema.
func (r *runner) store() *store.Store { return store.MustNew(r.schema) }
