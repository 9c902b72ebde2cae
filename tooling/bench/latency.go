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

	"github.com/drainer-io/drainer/producer"
	"github.com/jackc/pgx/v5/pgxpool"
)

// latencyProducers is how many producers enqueue at once, each on its own
// connection. A producer commits each row in its own transaction while it
// keeps up with the offered rate; rows that came due while it was
// committing go together in its next transaction (at most
// latencyMaxRowsPerXact), as an agent's queued work would. On a durable
// server every notifying commit takes a server-wide lock until its WAL is
// flushed, which caps single-row producers (see enqueue_single_rows_per_s);
// latency_rows_per_xact says how far producers had to group rows.
const latencyProducers = 32

// latencyCutoff bounds how long the phase waits, after the producers
// stopped, for the last rows to be dispatched.
const latencyCutoff = 10 * time.Second

// latencyMaxRowsPerXact bounds the rows a producer commits at once.
const latencyMaxRowsPerXact = 100

// latencyResult is what the latency phase measured.
type latencyResult struct {
	p50, p90, p99     float64 // ms from commit to dispatch start
	offered, achieved float64 // rows/s
	rowsPerXact       float64
	samples           int
	undispatched      int // rows not dispatched by the cutoff
	// claimed counts the phase's claimed rows by why their claim ran,
	// over every engine; "poll" is latency_poll_pickups.
	claimed map[string]uint64
}

// commit is one enqueue as its producer saw it.
type commit struct {
	key string
	at  time.Time
}

// latency runs the engines while producers offer rate rows/s, each in its
// own transaction through drainer's EnqueueTx, and measures from each
// commit's return to the start of that row's dispatch.
func (r *runner) latency(ctx context.Context, rate float64, share string) (latencyResult, error) {
	if rate <= 0 || math.IsNaN(rate) || math.IsInf(rate, 0) {
		return latencyResult{}, fmt.Errorf("latency: no drain rate to take %s of (%v)", share, rate)
	}
	total := int(rate * r.sizes.LatencyDuration.Seconds())
	r.logf("latency: enqueueing %.0f rows/s for %s (%s of the drain rate), %d producers", rate, r.sizes.LatencyDuration, share, latencyProducers)
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
	commits, xacts, perr := r.produce(ctx, producers, run, rate, total)
	res, err := r.collect(ctx, p, commits, perr)
	if xacts > 0 {
		res.rowsPerXact = float64(len(commits)) / float64(xacts)
	}
	if serr := es.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return latencyResult{}, err
	}
	res.offered = rate
	res.claimed = es.claimedRows()
	r.logf("latency: p50 %.2f ms, p90 %.2f ms, p99 %.2f ms over %d rows (%.0f rows/s achieved, %.2f rows per transaction); rows claimed by cause %v",
		res.p50, res.p90, res.p99, res.samples, res.achieved, res.rowsPerXact, res.claimed)
	return res, nil
}

// produce enqueues up to total rows on schedule (row i at i/rate seconds)
// with latencyProducers concurrent producers for LatencyDuration and returns
// their commits and how many transactions they took. Rows not sent when the
// duration is over stay unsent: the achieved rate says so.
func (r *runner) produce(ctx context.Context, pool *pgxpool.Pool, run string, rate float64, total int) ([]commit, int, error) {
	jobs := make(chan int, total)
	var (
		mu      sync.Mutex
		commits = make([]commit, 0, total)
		xacts   int
		errs    []error
		wg      sync.WaitGroup
	)
	prod := producer.Producer{Schema: r.schema}
	for range latencyProducers {
		wg.Go(func() {
			batch := make([]producer.Intent, 0, latencyMaxRowsPerXact)
			for i := range jobs {
				batch = append(batch[:0], intent(run, i))
			more:
				for len(batch) < latencyMaxRowsPerXact {
					select {
					case j, ok := <-jobs:
						if !ok {
							break more
						}
						batch = append(batch, intent(run, j))
					default:
						break more
					}
				}
				keys, at, err := enqueueRows(ctx, pool, prod, batch)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					xacts++
					for _, k := range keys {
						commits = append(commits, commit{key: k, at: at})
					}
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
		for ; sent < due; sent++ {
			jobs <- sent
		}
		<-tick.C
	}
	tick.Stop()
	// Rows offered but not yet taken by a producer when time is up are not sent.
	for len(jobs) > 0 {
		select {
		case <-jobs:
		default:
		}
	}
	close(jobs)
	wg.Wait()
	if len(errs) > 0 {
		return commits, xacts, fmt.Errorf("latency: %d enqueue transactions failed, first: %w", len(errs), errs[0])
	}
	return commits, xacts, ctx.Err()
}

// enqueueRows enqueues ins in one transaction and returns their keys and
// when the commit returned.
func enqueueRows(ctx context.Context, pool *pgxpool.Pool, p producer.Producer, ins []producer.Intent) ([]string, time.Time, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var keys []string
	if len(ins) == 1 {
		key, _, err := p.EnqueueTx(ctx, tx, ins[0])
		if err != nil {
			return nil, time.Time{}, err
		}
		keys = []string{key}
	} else {
		res, err := p.EnqueueBatchTx(ctx, tx, ins)
		if err != nil {
			return nil, time.Time{}, err
		}
		for _, e := range res {
			keys = append(keys, e.Key)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, time.Time{}, err
	}
	return keys, time.Now(), nil
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
	// Rows still undispatched latencyCutoff after the producers stopped
	// count with the time they had waited by then: a lower bound, which
	// keeps the phase bounded however late the drain is.
	cutoff := min(r.sizes.LatencyDuration, latencyCutoff)
	wctx, cancel := context.WithTimeout(ctx, cutoff)
	defer cancel()
	err := waitFor(wctx, 10*time.Millisecond, func() (bool, error) {
		return p.calls.Load() >= int64(len(commits)), nil
	})
	if err != nil && ctx.Err() != nil {
		return latencyResult{}, ctx.Err()
	}
	end := time.Now()
	slices.SortFunc(commits, func(a, b commit) int { return a.at.Compare(b.at) })
	first, last := commits[0].at, commits[len(commits)-1].at
	from := first.Add(r.sizes.LatencyWarmup)
	var ms []float64
	var late int
	for _, c := range commits {
		if c.at.Before(from) {
			continue
		}
		at := end
		if v, ok := p.keys.Load(c.key); ok {
			at = v.(time.Time)
		} else {
			late++
		}
		// The row is visible to a claim as soon as its commit is durable,
		// which can be a hair before the client hears so: count that as 0.
		d := max(at.Sub(c.at), 0)
		ms = append(ms, float64(d)/float64(time.Millisecond))
	}
	if late > 0 {
		r.logf("latency: %d rows not dispatched %s after the producers stopped; counted with the time they had waited (percentiles are lower bounds)", late, cutoff)
	}
	if len(ms) == 0 {
		return latencyResult{}, errors.New("latency: no row was committed after the warm-up")
	}
	slices.Sort(ms)
	res := latencyResult{p50: percentile(ms, 50), p90: percentile(ms, 90), p99: percentile(ms, 99), samples: len(ms), undispatched: late}
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

// claimedRows sums the engines' claimed rows by cause.
func (es engines) claimedRows() map[string]uint64 {
	sum := map[string]uint64{}
	for _, e := range es {
		for cause, n := range e.ClaimedRows() {
			sum[cause] += n
		}
	}
	return sum
}
