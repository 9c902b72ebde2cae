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
	clients, err := r.riverClients(s)
	if err != nil {
		return 0, err
	}
	if err := r.insertRiverJobs(ctx, clients[0], n); err != nil {
		return 0, err
	}
	ev := subscribeRiver(clients, n)
	begin := time.Now()
	runErr := r.runRiver(ctx, clients, ev, n)
	if err := errors.Join(append([]error{runErr}, stopRiver(clients, ev)...)...); err != nil {
		return 0, err
	}
	if f := ev.failed.Load(); f > 0 {
		return 0, fmt.Errorf("river: %d jobs failed or were cancelled; the no-op worker never fails", f)
	}
	elapsed := time.Duration(ev.lastNs.Load() - begin.UnixNano())
	rate := float64(n) / elapsed.Seconds()
	r.logf("river (%d workers per client, fetch cooldown %s, poll %s): %d jobs in %s = %.0f jobs/s (%d clients)",
		s.Workers, s.FetchCooldown, s.FetchPollInterval, n, elapsed.Round(time.Millisecond), rate, len(clients))
	return rate, nil
}

// riverClients makes one River client per replica pool, configured by s.
func (r *runner) riverClients(s RiverSetting) ([]*river.Client[pgx.Tx], error) {
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
			return nil, fmt.Errorf("river client: %w", err)
		}
		clients = append(clients, c)
	}
	return clients, nil
}

// insertRiverJobs empties river_job, inserts n jobs through c in batches of
// riverInsertBatch and lets the table settle.
func (r *runner) insertRiverJobs(ctx context.Context, c *river.Client[pgx.Tx], n int) error {
	if _, err := r.admin.Exec(ctx, "TRUNCATE "+r.riverSchema+".river_job"); err != nil {
		return fmt.Errorf("reset river_job: %w", err)
	}
	params := make([]river.InsertManyParams, 0, riverInsertBatch)
	for from := 0; from < n; from += riverInsertBatch {
		params = params[:0]
		for i := from; i < min(from+riverInsertBatch, n); i++ {
			params = append(params, river.InsertManyParams{Args: riverArgs{N: i}})
		}
		if _, err := c.InsertManyFast(ctx, params); err != nil {
			return fmt.Errorf("insert river jobs: %w", err)
		}
	}
	return r.settle(ctx, r.riverSchema+".river_job")
}

// riverEvents counts the job events of a River run's clients.
type riverEvents struct {
	completed atomic.Int64   // jobs finished, whatever the outcome
	failed    atomic.Int64   // jobs failed or cancelled
	lastNs    atomic.Int64   // when the n-th job finished (Unix ns)
	done      chan struct{}  // closed when the n-th job finished
	cancels   []func()       // end the subscriptions
	wg        sync.WaitGroup // the counting goroutines
}

// subscribeRiver subscribes to the job events of every client and counts
// them until stopRiver.
func subscribeRiver(clients []*river.Client[pgx.Tx], n int) *riverEvents {
	ev := &riverEvents{done: make(chan struct{})}
	for _, c := range clients {
		events, cancel := c.SubscribeConfig(&river.SubscribeConfig{
			ChanSize: n, // never drop an event: the count decides when the run ends
			Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
		})
		ev.cancels = append(ev.cancels, cancel)
		ev.wg.Go(func() {
			for e := range events {
				if e.Kind != river.EventKindJobCompleted {
					ev.failed.Add(1)
				}
				if ev.completed.Add(1) == int64(n) {
					ev.lastNs.Store(time.Now().UnixNano())
					close(ev.done)
				}
			}
		})
	}
	return ev
}

// runRiver starts the clients and waits until n jobs finished or the
// phase times out.
func (r *runner) runRiver(ctx context.Context, clients []*river.Client[pgx.Tx], ev *riverEvents, n int) error {
	for _, c := range clients {
		if err := c.Start(ctx); err != nil {
			return fmt.Errorf("start river client: %w", err)
		}
	}
	tctx, cancel := context.WithTimeout(ctx, r.phaseTimeout(n))
	defer cancel()
	select {
	case <-ev.done:
		return nil
	case <-tctx.Done():
		return fmt.Errorf("river: %d of %d jobs completed before giving up: %w", ev.completed.Load(), n, tctx.Err())
	}
}

// stopRiver stops the clients, ends their event subscriptions and waits
// until every event is counted; it returns the clients' stop errors.
func stopRiver(clients []*river.Client[pgx.Tx], ev *riverEvents) []error {
	stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	for _, c := range clients {
		if serr := c.Stop(stopCtx); serr != nil {
			errs = append(errs, fmt.Errorf("stop river client: %w", serr))
		}
	}
	for _, cancel := range ev.cancels {
		cancel() // closes the event channels
	}
	ev.wg.Wait()
	return errs
}
