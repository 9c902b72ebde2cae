package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ceilingPlanSettings are the engine's transaction-local claim plan
// settings: the claim always walks outbox_due_idx in order.
const ceilingPlanSettings = `SELECT set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true),
       set_config('plan_cache_mode', 'force_custom_plan', true)`

// ceilingClaimSQL has the shape of the engine's claim: a MATERIALIZED
// FOR UPDATE SKIP LOCKED pick of due rows in (next_attempt_at, seq) order,
// leased to in_flight in the same statement, returning what a worker needs.
const ceilingClaimSQL = `
WITH due AS MATERIALIZED (
    SELECT seq FROM %[1]s.outbox
     WHERE status = 'pending' AND next_attempt_at <= now()
     ORDER BY next_attempt_at, seq
     LIMIT $1
     FOR UPDATE SKIP LOCKED
)
UPDATE %[1]s.outbox o
   SET status = 'in_flight',
       attempts = o.attempts + 1,
       lease_token = gen_random_uuid(),
       lease_expires_at = now() + $2 * interval '1 millisecond',
       leased_by = $3,
       first_attempt_at = coalesce(o.first_attempt_at, now()),
       updated_at = now()
  FROM due
 WHERE o.seq = due.seq
RETURNING o.seq, o.key, o.agent_run_id, o.step_id, o.tool_name, o.business_scope, o.kind,
          o.payload, o.attempts, o.lease_token, o.first_attempt_at, now(), o.traceparent, o.forward_key`

// ceilingCompleteSQL records a batch as succeeded, fenced by lease token,
// setting what the engine's completion sets for a success without a response.
const ceilingCompleteSQL = `
UPDATE %[1]s.outbox o
   SET status = 'succeeded',
       last_error = NULL,
       last_problem = NULL,
       response = NULL,
       lease_token = NULL,
       lease_expires_at = NULL,
       leased_by = NULL,
       updated_at = now()
  FROM unnest($1::bigint[], $2::uuid[]) AS u(seq, token)
 WHERE o.seq = u.seq AND o.lease_token = u.token`

// ceilingLargeBatch is the large claim batch the ceiling tries: the
// engine's completion batch, so a claim costs one commit per this many rows.
const ceilingLargeBatch = 256

// ceiling measures loops bare claim/complete loops, each claiming batch
// rows at a time, draining Rows rows.
func (r *runner) ceiling(ctx context.Context, loops, batch int) (float64, error) {
	if err := r.fill(ctx, r.sizes.Rows); err != nil {
		return 0, err
	}
	pool, err := newPool(ctx, r.url, int32(loops))
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	claimSQL := fmt.Sprintf(ceilingClaimSQL, r.schema)
	completeSQL := fmt.Sprintf(ceilingCompleteSQL, r.schema)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		done int
	)
	begin := time.Now()
	for i := range loops {
		wg.Go(func() {
			n, err := ceilingLoop(ctx, pool, claimSQL, completeSQL, batch, fmt.Sprintf("ceiling-%d", i))
			mu.Lock()
			defer mu.Unlock()
			done += n
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	if err := errors.Join(errs...); err != nil {
		return 0, fmt.Errorf("ceiling: %w", err)
	}
	if done != r.sizes.Rows {
		return 0, fmt.Errorf("ceiling: %d of %d rows completed", done, r.sizes.Rows)
	}
	rate := float64(done) / elapsed.Seconds()
	r.logf("ceiling with %d loops claiming %d: %d rows in %s = %.0f rows/s (bare claim + batch complete)",
		loops, batch, done, elapsed.Round(time.Millisecond), rate)
	return rate, nil
}

// ceilingLoop claims and completes batches until no row is due, and
// returns how many rows it completed.
func ceilingLoop(ctx context.Context, pool *pgxpool.Pool, claimSQL, completeSQL string, batch int, replica string) (int, error) {
	total := 0
	seqs := make([]int64, 0, batch)
	tokens := make([]pgtype.UUID, 0, batch)
	for {
		seqs, tokens = seqs[:0], tokens[:0]
		// One round trip, as the engine claims: BEGIN, settings, claim, COMMIT.
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(ceilingPlanSettings)
		b.Queue(claimSQL, batch, (30 * time.Second).Milliseconds(), replica)
		b.Queue("COMMIT")
		br := pool.SendBatch(ctx, b)
		err := func() error {
			defer br.Close()
			for range 2 {
				if _, err := br.Exec(); err != nil {
					return err
				}
			}
			rows, err := br.Query()
			if err != nil {
				return err
			}
			var (
				seq                               int64
				key, run, step, tool, scope, kind string
				payload                           []byte
				attempts                          int
				token                             pgtype.UUID
				firstAt, now                      time.Time
				trace, forward                    *string
			)
			_, err = pgx.ForEachRow(rows, []any{&seq, &key, &run, &step, &tool, &scope, &kind, &payload, &attempts, &token, &firstAt, &now, &trace, &forward}, func() error {
				seqs, tokens = append(seqs, seq), append(tokens, token)
				return nil
			})
			if err != nil {
				return err
			}
			_, err = br.Exec()
			return err
		}()
		if err != nil {
			return total, fmt.Errorf("claim: %w", err)
		}
		if len(seqs) == 0 {
			return total, nil
		}
		tag, err := pool.Exec(ctx, completeSQL, seqs, tokens)
		if err != nil {
			return total, fmt.Errorf("complete: %w", err)
		}
		total += int(tag.RowsAffected())
	}
}
