package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ceilingTable is the name of the ceiling's table in the bench schema
// (left out of dead_tuples_after: it is not one of drainer's).
const ceilingTable = "ceiling_outbox"

// minimalTableSQL creates the ceiling's table (docs/reference.md §8): the least an
// outbox needs (key, status, next_attempt_at, attempts, lease token,
// payload), its key as primary key, one partial index on due pending rows,
// and no triggers. %[1]s is the bench schema.
const minimalTableSQL = `
CREATE TABLE %[1]s.ceiling_outbox (
    key             text        PRIMARY KEY,
    status          text        NOT NULL DEFAULT 'pending',
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    attempts        integer     NOT NULL DEFAULT 0,
    lease_token     uuid,
    payload         jsonb       NOT NULL
);
CREATE INDEX ceiling_outbox_due_idx ON %[1]s.ceiling_outbox (next_attempt_at) WHERE status = 'pending';
`

// ceilingClaimSettings are what drainer's claim sets (store/claim.go): the
// plan pinned to the ordered index scan and made once per connection, and
// synchronous_commit off, as
// drainer claims whenever no route is non_idempotent (the shipped default
// route class is key_idempotent).
const ceilingClaimSettings = `SELECT set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true),
       set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('synchronous_commit', 'off', true)`

// ceilingClaimSQL leases a batch of due rows in one statement.
const ceilingClaimSQL = `
WITH due AS MATERIALIZED (
    SELECT key FROM %[1]s.ceiling_outbox
     WHERE status = 'pending' AND next_attempt_at <= now()
     ORDER BY next_attempt_at
     LIMIT $1
     FOR UPDATE SKIP LOCKED
)
UPDATE %[1]s.ceiling_outbox o
   SET status = 'in_flight', attempts = o.attempts + 1, lease_token = gen_random_uuid()
  FROM due
 WHERE o.key = due.key
RETURNING o.key, o.payload, o.attempts, o.lease_token`

// ceilingCompleteSQL records a batch as succeeded, fenced by lease token.
// Like drainer's completion (store/complete.go) it commits with
// synchronous_commit off.
const ceilingCompleteSQL = `
UPDATE %[1]s.ceiling_outbox o
   SET status = 'succeeded', lease_token = NULL
  FROM unnest($1::text[], $2::uuid[]) AS u(key, token)
 WHERE o.key = u.key AND o.lease_token = u.token`

// ceiling measures loops bare claim/complete loops on the minimal table,
// each claiming batch rows at a time, draining Rows rows.
func (r *runner) ceiling(ctx context.Context, loops, batch int) (float64, error) {
	if err := r.fillMinimal(ctx, r.sizes.Rows); err != nil {
		return 0, err
	}
	pool, err := newReplicaPool(ctx, r.url, int32(loops))
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
	for range loops {
		wg.Go(func() {
			n, err := ceilingLoop(ctx, pool, claimSQL, completeSQL, batch)
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
	r.logf("ceiling, %d loops claiming %d: %d rows in %s = %.0f rows/s (bare claim + batch complete, minimal table)",
		loops, batch, done, elapsed.Round(time.Millisecond), rate)
	return rate, nil
}

// ceilingLoop claims and completes batches until no row is due, and
// returns how many rows it completed.
func ceilingLoop(ctx context.Context, pool *pgxpool.Pool, claimSQL, completeSQL string, batch int) (int, error) {
	total := 0
	keys := make([]string, 0, batch)
	tokens := make([]pgtype.UUID, 0, batch)
	for {
		keys, tokens = keys[:0], tokens[:0]
		// One round trip, as drainer claims: BEGIN, settings, claim, COMMIT.
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(ceilingClaimSettings)
		b.Queue(claimSQL, batch)
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
				key      string
				payload  []byte
				attempts int
				token    pgtype.UUID
			)
			_, err = pgx.ForEachRow(rows, []any{&key, &payload, &attempts, &token}, func() error {
				keys, tokens = append(keys, key), append(tokens, token)
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
		if len(keys) == 0 {
			return total, nil
		}
		c := &pgx.Batch{}
		c.Queue("BEGIN")
		c.Queue("SET LOCAL synchronous_commit = off")
		c.Queue(completeSQL, keys, tokens)
		c.Queue("COMMIT")
		cr := pool.SendBatch(ctx, c)
		var n int64
		err = func() error {
			defer cr.Close()
			for i := range 4 {
				tag, err := cr.Exec()
				if err != nil {
					return err
				}
				if i == 2 {
					n = tag.RowsAffected()
				}
			}
			return nil
		}()
		if err != nil {
			return total, fmt.Errorf("complete: %w", err)
		}
		total += int(n)
	}
}

// fillMinimal empties the minimal table and COPYs n pending rows into it.
func (r *runner) fillMinimal(ctx context.Context, n int) error {
	t := r.schema + "." + ceilingTable
	if _, err := r.admin.Exec(ctx, "TRUNCATE "+t); err != nil {
		return fmt.Errorf("reset %s: %w", t, err)
	}
	r.runSeq++
	prefix := "ceiling-" + strconv.Itoa(r.runSeq) + "-"
	rows := make([][]any, 0, min(n, fillChunk))
	for from := 0; from < n; from += fillChunk {
		rows = rows[:0]
		for i := from; i < min(from+fillChunk, n); i++ {
			rows = append(rows, []any{prefix + strconv.Itoa(i), []byte(`{"n": ` + strconv.Itoa(i) + `}`)})
		}
		if _, err := r.admin.CopyFrom(ctx, pgx.Identifier{r.schema, ceilingTable}, []string{"key", "payload"}, pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("fill %s: %w", t, err)
		}
	}
	return r.settle(ctx, t)
}
