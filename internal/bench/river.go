package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverInsertBatch is how many jobs one InsertManyFast call inserts (as
// River's riverbench does).
const riverInsertBatch = 5_000

// riverArgs are the bench's River job arguments.
type riverArgs struct {
	N int `json:"n"`
}

// Kind implements river.JobArgs.
func (riverArgs) Kind() string { return "drainer_bench_noop" }

// riverWorker does nothing, like the drain's no-op adapter.
type riverWorker struct {
	river.WorkerDefaults[riverArgs]
}

// Work implements river.Worker.
func (riverWorker) Work(context.Context, *river.Job[riverArgs]) error { return nil }

// migrateRiver applies River's migrations to schema.
func migrateRiver(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate river schema %s: %w", schema, err)
	}
	return nil
}

// river measures River working Rows pre-inserted no-op jobs with one client
// per replica pool, each with MaxWorkers = s.Workers: from client start
// until the last job-completed event, as riverbench measures.
func (r *runner) river(ctx context.Context, s RiverSetting) (float64, error) {
	n := r.sizes.Rows
	workers := river.NewWorkers()
	river.AddWorker(workers, riverWorker{})
	var clients []*river.Client[pgx.Tx]
	for _, pool := range r.pools {
		c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
			Schema:            r.riverSchema,
			FetchCooldown:     s.FetchCooldown,
			FetchPollInterval: s.FetchPollInterval,
			Logger:            slog.New(slog.DiscardHandler),
			Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: s.Workers}},
			Workers:           workers,
		})
		if err != nil {
			return 0, fmt.Errorf("river client: %w", err)
		}
		clients = append(clients, c)
	}

	if _, err := r.admin.Exec(ctx, "TRUNCATE "+r.riverSchema+".river_job"); err != nil {
		return 0, fmt.Errorf("reset river_job: %w", err)
	}
	params := make([]river.InsertManyParams, 0, riverInsertBatch)
	for from := 0; from < n; from += riverInsertBatch {
		params = params[:0]
		for i := from; i < min(from+riverInsertBatch, n); i++ {
			params = append(params, river.InsertManyParams{Args: riverArgs{N: i}})
		}
		if _, err := clients[0].InsertManyFast(ctx, params); err != nil {
			return 0, fmt.Errorf("insert river jobs: %w", err)
		}
	}
	if err := r.settle(ctx, r.riverSchema+".river_job"); err != nil {
		return 0, err
	}

	var (
		completed atomic.Int64
		failed    atomic.Int64
		lastNs    atomic.Int64
		done      = make(chan struct{})
		wg        sync.WaitGroup
	)
	var cancels []func()
	for _, c := range clients {
		events, cancel := c.SubscribeConfig(&river.SubscribeConfig{
			ChanSize: n, // never drop an event: the count decides when the run ends
			Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
		})
		cancels = append(cancels, cancel)
		wg.Go(func() {
			for ev := range events {
				if ev.Kind != river.EventKindJobCompleted {
					failed.Add(1)
				}
				if completed.Add(1) == int64(n) {
					lastNs.Store(time.Now().UnixNano())
					close(done)
				}
			}
		})
	}

	begin := time.Now()
	var err error
	for _, c := range clients {
		if err = c.Start(ctx); err != nil {
			err = fmt.Errorf("start river client: %w", err)
			break
		}
	}
	if err == nil {
		tctx, cancel := context.WithTimeout(ctx, r.phaseTimeout(n))
		select {
		case <-done:
		case <-tctx.Done():
			err = fmt.Errorf("river: %d of %d jobs completed before giving up: %w", completed.Load(), n, tctx.Err())
		}
		cancel()
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	for _, c := range clients {
		if serr := c.Stop(stopCtx); serr != nil {
			errs = append(errs, fmt.Errorf("stop river client: %w", serr))
		}
	}
	for _, cancel := range cancels {
		cancel() // closes the event channels
	}
	wg.Wait()
	if err := errors.Join(append([]error{err}, errs...)...); err != nil {
		return 0, err
	}
	if f := failed.Load(); f > 0 {
		return 0, fmt.Errorf("river: %d jobs failed or were cancelled; the no-op worker never fails", f)
	}
	elapsed := time.Duration(lastNs.Load() - begin.UnixNano())
	rate := float64(n) / elapsed.Seconds()
	r.logf("river (%d workers per client, fetch cooldown %s, poll %s): %d jobs in %s = %.0f jobs/s (%d clients)",
		s.Workers, s.FetchCooldown, s.FetchPollInterval, n, elapsed.Round(time.Millisecond), rate, len(clients))
	return rate, nil
}
