package bench

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/producer"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// enqueueConnections is how many connections enqueue at once (docs/reference.md §8).
const enqueueConnections = 8

// enqueueBatchSizes are the EnqueueBatchTx sizes tried; the best counts.
var enqueueBatchSizes = []int{100, 1000}

// insertShapeSQL creates the plain insert's table: an outbox in one table
// with no trigger, the columns an enqueue writes (the intent's, with their
// defaults, constraints and indexes, and a status, attempts and due time)
// and the due index a claim would need.
const insertShapeSQL = `
CREATE TABLE %[1]s.insert_shape (LIKE %[1]s.intents INCLUDING ALL);
ALTER TABLE %[1]s.insert_shape
    ADD COLUMN status text NOT NULL DEFAULT 'pending',
    ADD COLUMN attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN next_attempt_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX insert_shape_due_idx ON %[1]s.insert_shape (next_attempt_at, seq) WHERE status = 'pending';
`

// insertSingleSQL is the plain insert enqueue_single_rows_per_s is compared with.
const insertSingleSQL = `INSERT INTO %s.insert_shape (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash)
VALUES ($1, $2, $3, $4, '', 'forward', $5, $6) ON CONFLICT DO NOTHING`

// enqueues measures enqueue_single_rows_per_s, insert_single_rows_per_s,
// enqueue_batch_rows_per_s and the single enqueue without notification,
// each writing Rows rows from enqueueConnections connections.
func (r *runner) enqueues(ctx context.Context, res *Result) error {
	n := r.sizes.Rows
	res.EnqueueConnections = enqueueConnections
	prod := producer.Producer{Schema: r.schema}

	single := func(ctx context.Context, pool *pgxpool.Pool, run string, from, to int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, _, err := prod.EnqueueTx(ctx, tx, intent(run, from))
			return err
		})
	}
	rate, err := r.produceRows(ctx, "enqueue, one row per transaction (drainer.enqueue)", n, 1, false, single)
	if err != nil {
		return err
	}
	res.EnqueueSingleRowsPerS = round(rate, 1)
	// The same without notification shows what the notify lock costs;
	// --quick leaves it out for time.
	if !r.opts.Quick {
		if rate, err = r.produceRows(ctx, "enqueue, one row per transaction, SET drainer.notify = off", n, 1, true, single); err != nil {
			return err
		}
		res.EnqueueSingleNotifyOffRowsPerS = round(rate, 1)
	}

	insertSQL := fmt.Sprintf(insertSingleSQL, r.schema)
	if _, err := r.admin.Exec(ctx, "TRUNCATE "+r.schema+".insert_shape"); err != nil {
		return fmt.Errorf("reset insert_shape: %w", err)
	}
	rate, err = r.produceRows(ctx, "plain INSERT … ON CONFLICT DO NOTHING, one row per transaction", n, 1, false,
		func(ctx context.Context, pool *pgxpool.Pool, run string, from, to int) error {
			in := intent(run, from)
			hash := sha256.Sum256(in.Payload)
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, insertSQL, in.Key(), in.AgentRunID, in.StepID, in.ToolName, in.Payload, hash[:])
				return err
			})
		})
	if err != nil {
		return err
	}
	res.InsertSingleRowsPerS = round(rate, 1)

	for _, size := range enqueueBatchSizes {
		rate, err := r.produceRows(ctx, fmt.Sprintf("enqueue, %d rows per transaction (producer.EnqueueBatchTx)", size), n, size, false,
			func(ctx context.Context, pool *pgxpool.Pool, run string, from, to int) error {
				ins := make([]producer.Intent, 0, to-from)
				for i := from; i < to; i++ {
					ins = append(ins, intent(run, i))
				}
				return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := prod.EnqueueBatchTx(ctx, tx, ins)
					return err
				})
			})
		if err != nil {
			return err
		}
		if rate = round(rate, 1); rate > res.EnqueueBatchRowsPerS {
			res.EnqueueBatchRowsPerS, res.EnqueueBatchSize = rate, size
		}
	}
	return nil
}

// intent is the i-th bench intent of run.
func intent(run string, i int) producer.Intent {
	return producer.Intent{
		Tuple:   idemkey.Tuple{AgentRunID: run + strconv.Itoa(i/rowsPerRun), StepID: "step-" + strconv.Itoa(i), ToolName: benchTool},
		Payload: []byte(`{"n": ` + strconv.Itoa(i) + `}`),
	}
}

// produceRows empties the outbox and writes n rows, batch at a time, from
// enqueueConnections connections (with drainer.notify off if notifyOff),
// and returns the rate: rows over the time from the first write to the last
// commit.
func (r *runner) produceRows(ctx context.Context, what string, n, batch int, notifyOff bool,
	write func(ctx context.Context, pool *pgxpool.Pool, run string, from, to int) error) (float64, error) {
	if err := r.reset(ctx); err != nil {
		return 0, err
	}
	if err := r.settle(ctx, r.schema+".queue", r.schema+".intents"); err != nil {
		return 0, err
	}
	pc, err := pgxpool.ParseConfig(r.url)
	if err != nil {
		return 0, fmt.Errorf("database URL: %w", err)
	}
	pc.MaxConns, pc.MinConns = enqueueConnections, enqueueConnections
	pc.ConnConfig.RuntimeParams["application_name"] = applicationName
	if notifyOff {
		pc.ConnConfig.RuntimeParams["drainer.notify"] = "off"
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	// Open every connection before the clock starts.
	var conns []*pgxpool.Conn
	for range enqueueConnections {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return 0, fmt.Errorf("connect: %w", err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}

	r.runSeq++
	run := "enq-" + strconv.Itoa(r.runSeq) + "-"
	jobs := make(chan int)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	begin := time.Now()
	for range enqueueConnections {
		wg.Go(func() {
			for from := range jobs {
				if err := write(ctx, pool, run, from, min(from+batch, n)); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
feed:
	for from := 0; from < n; from += batch {
		select {
		case jobs <- from:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(begin)
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if len(errs) > 0 {
		return 0, fmt.Errorf("%s: %d of %d writes failed, first: %w", what, len(errs), (n+batch-1)/batch, errors.Join(errs[0]))
	}
	rate := float64(n) / elapsed.Seconds()
	r.logf("%s: %d rows in %s = %.0f rows/s (%d connections)", what, n, elapsed.Round(time.Millisecond), rate, enqueueConnections)
	return rate, nil
}
