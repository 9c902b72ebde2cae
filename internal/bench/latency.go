package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/producer"
	"github.com/jackc/pgx/v5/pgxpool"
)

// latencyProducers is how many producers enqueue at once, each a
// connection committing single-row transactions.
const latencyProducers = 32

// latencyResult is what the latency phase measured.
type latencyResult struct {
	p50, p90, p99     float64 // ms from commit to dispatch start
	offered, achieved float64 // rows/s
	samples           int
}

// commit is one enqueue as its producer saw it.
type commit struct {
	key string
	at  time.Time
}

// latency runs the engines while producers offer rate rows/s, each in its
// own transaction through drainer's EnqueueTx, and measures from each
// commit's return to the start of that row's dispatch.
func (r *runner) latency(ctx context.Context, rate float64) (latencyResult, error) {
	if rate <= 0 || math.IsNaN(rate) || math.IsInf(rate, 0) {
		return latencyResult{}, fmt.Errorf("latency: no drain rate to take half of (%v)", rate)
	}
	total := int(rate * r.sizes.LatencyDuration.Seconds())
	r.logf("latency: enqueueing %.0f rows/s for %s (half the drain rate), single-row transactions", rate, r.sizes.LatencyDuration)
	if err := r.reset(ctx); err != nil {
		return latencyResult{}, err
	}
	producers, err := newPool(ctx, r.url, latencyProducers)
	if err != nil {
		return latencyResult{}, err
	}
	defer producers.Close()
	p := newProbe(-1, true)
	es, err := r.startEngines(ctx, p.adapter())
	if err != nil {
		return latencyResult{}, err
	}
	r.runSeq++
	run := "lat-" + strconv.Itoa(r.runSeq) + "-"
	commits, perr := r.produce(ctx, producers, run, rate, total)
	res, err := r.collect(ctx, p, commits, perr)
	if serr := es.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return latencyResult{}, err
	}
	res.offered = rate
	r.logf("latency: p50 %.2f ms, p90 %.2f ms, p99 %.2f ms over %d rows (%.0f rows/s achieved)",
		res.p50, res.p90, res.p99, res.samples, res.achieved)
	return res, nil
}

// produce enqueues up to total rows on schedule (row i at i/rate seconds)
// with latencyProducers concurrent producers for LatencyDuration and returns
// their commits. Producers that fall behind delay the rows after them and
// leave the rest unsent: the achieved rate says so.
func (r *runner) produce(ctx context.Context, pool *pgxpool.Pool, run string, rate float64, total int) ([]commit, error) {
	jobs := make(chan int, latencyProducers)
	var (
		mu      sync.Mutex
		commits = make([]commit, 0, total)
		errs    []error
		wg      sync.WaitGroup
	)
	prod := producer.Producer{Schema: r.schema}
	for range latencyProducers {
		wg.Go(func() {
			for i := range jobs {
				in := producer.Intent{
					Tuple:   idemkey.Tuple{AgentRunID: run + strconv.Itoa(i/rowsPerRun), StepID: "step-" + strconv.Itoa(i), ToolName: benchTool},
					Payload: []byte(`{"n": ` + strconv.Itoa(i) + `}`),
				}
				key, at, err := enqueueOne(ctx, pool, prod, in)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					commits = append(commits, commit{key: key, at: at})
				}
				mu.Unlock()
			}
		})
	}
	// Rows are offered on schedule until the duration is over, whether or
	// not the producers kept up: the phase never outlasts its duration.
	begin := time.Now()
	deadline := begin.Add(r.sizes.LatencyDuration)
	tick := time.NewTicker(time.Millisecond)
	sent := 0
	for sent < total && ctx.Err() == nil && time.Now().Before(deadline) {
		due := min(total, int(time.Since(begin).Seconds()*rate)+1)
		for ; sent < due && time.Now().Before(deadline); sent++ {
			jobs <- sent
		}
		<-tick.C
	}
	tick.Stop()
	close(jobs)
	wg.Wait()
	if len(errs) > 0 {
		return commits, fmt.Errorf("latency: %d of %d enqueues failed, first: %w", len(errs), total, errs[0])
	}
	return commits, ctx.Err()
}

// enqueueOne enqueues in in its own transaction and returns its key and
// when the commit returned.
func enqueueOne(ctx context.Context, pool *pgxpool.Pool, p producer.Producer, in producer.Intent) (string, time.Time, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return "", time.Time{}, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	key, _, err := p.EnqueueTx(ctx, tx, in)
	if err != nil {
		return "", time.Time{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return "", time.Time{}, err
	}
	return key, time.Now(), nil
}

// collect waits until every committed row was dispatched and turns the
// commit and dispatch times into percentiles, leaving out the rows
// committed during the warm-up.
func (r *runner) collect(ctx context.Context, p *probe, commits []commit, produceErr error) (latencyResult, error) {
	if produceErr != nil {
		return latencyResult{}, produceErr
	}
	if len(commits) == 0 {
		return latencyResult{}, errors.New("latency: nothing was enqueued")
	}
	ctx, cancel := context.WithTimeout(ctx, r.phaseTimeout(len(commits)))
	defer cancel()
	err := waitFor(ctx, 10*time.Millisecond, func() (bool, error) {
		return p.calls.Load() >= int64(len(commits)), nil
	})
	if err != nil {
		return latencyResult{}, fmt.Errorf("latency: %d of %d enqueued rows dispatched before giving up: %w", p.calls.Load(), len(commits), err)
	}
	slices.SortFunc(commits, func(a, b commit) int { return a.at.Compare(b.at) })
	first, last := commits[0].at, commits[len(commits)-1].at
	from := first.Add(r.sizes.LatencyWarmup)
	var ms []float64
	for _, c := range commits {
		v, ok := p.keys.Load(c.key)
		if !ok {
			return latencyResult{}, fmt.Errorf("latency: row %s was committed but never dispatched", c.key)
		}
		if c.at.Before(from) {
			continue
		}
		// The row is visible to a claim as soon as its commit is durable,
		// which can be a hair before the client hears so: count that as 0.
		d := max(v.(time.Time).Sub(c.at), 0)
		ms = append(ms, float64(d)/float64(time.Millisecond))
	}
	if len(ms) == 0 {
		return latencyResult{}, errors.New("latency: no row was committed after the warm-up")
	}
	slices.Sort(ms)
	res := latencyResult{p50: percentile(ms, 50), p90: percentile(ms, 90), p99: percentile(ms, 99), samples: len(ms)}
	if span := last.Sub(first).Seconds(); span > 0 {
		res.achieved = float64(len(commits)-1) / span
	}
	return res, nil
}

// percentile returns the nearest-rank p-th percentile of sorted values.
func percentile(sorted []float64, p float64) float64 {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}
