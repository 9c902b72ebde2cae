package receiver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Record states (column state of <schema>.records).
const (
	stateInFlight  = "in_flight"
	stateCompleted = "completed"
	// stateOutcomeUnknown: the request stopped mid-run outside a
	// transaction and a retry found it abandoned; kept for a person.
	stateOutcomeUnknown = "outcome_unknown"
)

// migrateLockKey names the advisory lock that serialises Migrate across
// processes (the Python and TypeScript receivers take the same one).
const migrateLockKey = "drainer_receiver.migrate"

// pruneBatch is how many expired records one Prune statement deletes.
const pruneBatch = 1000

// migrateSQL creates the store; %[1]s is the quoted schema. Every statement
// is idempotent, but some lock the records table even when it exists:
// Migrate runs it only when currentSQL finds the store incomplete.
const migrateSQL = `
CREATE SCHEMA IF NOT EXISTS %[1]s;
CREATE TABLE IF NOT EXISTS %[1]s.records (
    scope         text        NOT NULL,
    key           text        NOT NULL,
    fingerprint   bytea       NOT NULL,
    state         text        NOT NULL,
    locked_until  timestamptz,
    status        integer,
    headers       jsonb,
    body          bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    completed_at  timestamptz,
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (scope, key),
    CONSTRAINT records_state CHECK (state IN ('in_flight', 'completed', 'outcome_unknown'))
);
CREATE INDEX IF NOT EXISTS records_expires_idx ON %[1]s.records (expires_at);
`

// currentSQL tells whether the store is as this version creates it: the
// records table (its quoted name is $1) with its state check and its expiry
// index ($2). It reads only the catalog and takes no lock on the table.
const currentSQL = `SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL
	AND EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass($1) AND conname = 'records_state')`

// hasStatesSQL tells whether the records table (its quoted name is $1)
// has the state check that allows outcome_unknown.
const hasStatesSQL = `SELECT EXISTS (SELECT 1 FROM pg_constraint
	WHERE conrelid = $1::regclass AND conname = 'records_state')`

// upgradeStatesSQL widens the state check of a store created before the
// outcome_unknown state (its check was the unnamed records_state_check);
// %[1]s is the quoted schema. Every row passes the wider check.
const upgradeStatesSQL = `ALTER TABLE %[1]s.records DROP CONSTRAINT IF EXISTS records_state_check,
	ADD CONSTRAINT records_state CHECK (state IN ('in_flight', 'completed', 'outcome_unknown'))`

// Migrate creates the schema, the records table and its index if they do
// not exist, and upgrades a table created by an earlier version in place.
// It is safe to run from many processes at once. On a store that is
// already up to date it runs no DDL and takes no lock on the records table
// (only the catalog is read), so a replica starting up never waits for, or
// holds up, the requests other replicas are serving: CREATE INDEX IF NOT
// EXISTS, for one, locks the table before it finds the index there.
func (rc *Receiver) Migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, rc.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, migrateLockKey); err != nil {
			return err
		}
		var current bool
		if err := tx.QueryRow(ctx, currentSQL, rc.table, rc.schema+".records_expires_idx").Scan(&current); err != nil || current {
			return err
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(migrateSQL, rc.schema)); err != nil {
			return err
		}
		var has bool
		if err := tx.QueryRow(ctx, hasStatesSQL, rc.table).Scan(&has); err != nil || has {
			return err
		}
		_, err := tx.Exec(ctx, fmt.Sprintf(upgradeStatesSQL, rc.schema))
		return err
	})
	if err != nil {
		return fmt.Errorf("receiver: migrate schema %s: %w", rc.schema, err)
	}
	return nil
}

// Prune deletes expired records in batches of 1000 until none is left and
// returns how many it deleted. Expired records are never replayed (a request
// with an expired key runs the handler again), so pruning only reclaims
// space.
func (rc *Receiver) Prune(ctx context.Context) (int64, error) {
	q := `DELETE FROM ` + rc.table + ` WHERE (scope, key) IN (
		SELECT scope, key FROM ` + rc.table + ` WHERE expires_at <= now()
		LIMIT ` + fmt.Sprint(pruneBatch) + ` FOR UPDATE SKIP LOCKED)`
	var total int64
	for {
		tag, err := rc.pool.Exec(ctx, q)
		if err != nil {
			return total, fmt.Errorf("receiver: prune %s: %w", rc.table, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneBatch {
			return total, nil
		}
	}
}

// RunPruner calls Prune every interval until ctx is done; it returns
// ctx.Err(). Prune errors are passed to onError when it is not nil, and the
// pruner keeps going.
func (rc *Receiver) RunPruner(ctx context.Context, interval time.Duration, onError func(error)) error {
	if interval <= 0 {
		interval = time.Hour
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := rc.Prune(ctx); err != nil && onError != nil && ctx.Err() == nil {
			onError(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// pgLockNotAvailable is the SQLSTATE of a NOWAIT lock that is taken.
const pgLockNotAvailable = "55P03"

// errLocked ends a claim transaction whose record another transaction holds.
var errLocked = errors.New("receiver: record locked")

// claimOutcome is what the claim step decided for one request.
type claimOutcome int

const (
	// claimed: this request owns the in-flight record; run the handler.
	claimed claimOutcome = iota
	// replay: the record completed with the same fingerprint.
	replay
	// mismatch: the record holds another request's fingerprint.
	mismatch
	// inFlight: another request with the key is running.
	inFlight
	// outcomeUnknown: the request holding the key stopped mid-run outside
	// a transaction; its effect may exist.
	outcomeUnknown
)

// stored is a completed record's answer.
type stored struct {
	status  int
	headers http.Header
	body    []byte
}

// claimResult is the claim step's decision; token fences the completion of
// a claimed record (its locked_until, set from the database clock).
// abandoned is set when this claim found the record of a request that
// stopped mid-run: it then either marked it outcome_unknown or (rerun) took
// it over, and the caller reports it once the claim has committed.
type claimResult struct {
	outcome   claimOutcome
	token     time.Time
	answer    stored
	abandoned bool
}

// claimRounds bounds the rounds of one claim: a round finds no record to
// decide from when one was deleted (its handler answered 5xx) or is being
// inserted by a transaction holding the key's claim lock.
const claimRounds = 3

// claim runs step 2 of the request flow (docs/receiver.md) in short
// transactions of its own: insert the in-flight record, or decide from the
// existing one.
func (rc *Receiver) claim(ctx context.Context, scope, key string, fp []byte) (claimResult, error) {
	for range claimRounds {
		var (
			res  claimResult
			done bool
		)
		err := pgx.BeginFunc(ctx, rc.pool, func(tx pgx.Tx) error {
			var err error
			res, done, err = rc.claimRound(ctx, tx, scope, key, fp)
			return err
		})
		if errors.Is(err, errLocked) {
			return claimResult{outcome: inFlight}, nil
		}
		if err != nil {
			return claimResult{}, err
		}
		if done {
			return res, nil
		}
	}
	return claimResult{outcome: inFlight}, nil
}

// claimIn runs the claim step inside tx, the transaction the handler then
// runs in (Options.InTransaction): the record is written uncommitted, so it
// commits with the handler's effect or not at all. On errLocked tx is
// aborted and the answer is in-flight.
func (rc *Receiver) claimIn(ctx context.Context, tx pgx.Tx, scope, key string, fp []byte) (claimResult, error) {
	for range claimRounds {
		res, done, err := rc.claimRound(ctx, tx, scope, key, fp)
		if errors.Is(err, errLocked) {
			return claimResult{outcome: inFlight}, nil
		}
		if err != nil || done {
			return res, err
		}
	}
	return claimResult{outcome: inFlight}, nil
}

// claimSQL inserts the in-flight record of a first request. It inserts
// only while holding the key's claim lock, a transaction-level advisory
// lock on hashtextextended(schema || E'\n' || scope || E'\n' || key, 0)
// (the Python and TypeScript receivers take the same one): a record being
// inserted by an open InTransaction run holds that lock, so a concurrent
// request finds no record and no lock, and answers in-flight instead of
// waiting for the run to end.
const claimSQL = `INSERT INTO %s (scope, key, fingerprint, state, locked_until, expires_at)
	SELECT $1, $2, $3, 'in_flight', now() + $4::bigint * interval '1 microsecond', now() + $5::bigint * interval '1 microsecond'
	WHERE pg_try_advisory_xact_lock(hashtextextended($6::text || chr(10) || $1::text || chr(10) || $2::text, 0))
	ON CONFLICT (scope, key) DO NOTHING RETURNING locked_until`

// claimRound is one round of the claim in tx; done is false when there was
// no record to decide from (try again). All times come from the database
// clock.
func (rc *Receiver) claimRound(ctx context.Context, tx pgx.Tx, scope, key string, fp []byte) (res claimResult, done bool, err error) {
	err = tx.QueryRow(ctx, rc.claimSQL,
		scope, key, fp, rc.opts.RecoveryTimeout.Microseconds(), rc.opts.TTL.Microseconds(), rc.opts.Schema).Scan(&res.token)
	if err == nil {
		return claimResult{outcome: claimed, token: res.token}, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return res, false, err
	}
	rec, err := rc.readRecord(ctx, tx, scope, key, fp)
	if err != nil || rec == nil {
		return res, false, err
	}
	sameRequest := string(rec.fingerprint) == string(fp)
	switch {
	case rec.renewable():
		// An expired key is a new first request, unless its first
		// request is still running (see renewable).
		err = tx.QueryRow(ctx, `UPDATE `+rc.table+` SET fingerprint = $3, state = 'in_flight',
				locked_until = now() + $4::bigint * interval '1 microsecond', status = NULL, headers = NULL, body = NULL,
				created_at = now(), completed_at = NULL, expires_at = now() + $5::bigint * interval '1 microsecond'
			WHERE scope = $1 AND key = $2 RETURNING locked_until`,
			scope, key, fp, rc.opts.RecoveryTimeout.Microseconds(), rc.opts.TTL.Microseconds()).Scan(&res.token)
		res.outcome = claimed
	case !sameRequest:
		res.outcome = mismatch
	case rec.state == stateCompleted:
		res.outcome = replay
		res.answer = stored{status: 200, headers: http.Header(rec.headers), body: rec.body}
		if rec.status != nil {
			res.answer.status = int(*rec.status)
		}
	case rec.state == stateOutcomeUnknown:
		res.outcome = outcomeUnknown
	case !rec.recoverable:
		res.outcome = inFlight
	case rc.opts.RerunAbandoned:
		// The first request's process stopped mid-run and the service
		// declared the handler safe to run again: take the record over.
		err = tx.QueryRow(ctx, `UPDATE `+rc.table+` SET locked_until = now() + $3::bigint * interval '1 microsecond'
			WHERE scope = $1 AND key = $2 RETURNING locked_until`,
			scope, key, rc.opts.RecoveryTimeout.Microseconds()).Scan(&res.token)
		res.outcome, res.abandoned = claimed, true
	default:
		// The first request's process stopped mid-run and its effect may
		// exist: keep the record for a person. locked_until stays, so a
		// first handler that was only cut off from the database can still
		// complete (or release) it.
		_, err = tx.Exec(ctx, `UPDATE `+rc.table+` SET state = 'outcome_unknown' WHERE scope = $1 AND key = $2`, scope, key)
		res.outcome, res.abandoned = outcomeUnknown, true
	}
	return res, err == nil, err
}

// storedRecord is a record as claimRound reads it.
type storedRecord struct {
	fingerprint          []byte
	state                string
	expired, recoverable bool
	status               *int32
	headers              map[string][]string
	body                 []byte
}

// renewable reports whether an expired record makes the request a new
// first request: a completed or outcome_unknown record, or an in-flight
// one past its recovery deadline (its process stopped). An in-flight
// record whose deadline is ahead is still running (its deadline moves
// forward while the handler runs) and answers as it did before its TTL
// passed; overwriting it would run the handler a second time alongside the
// first.
func (r *storedRecord) renewable() bool {
	return r.expired && (r.state != stateInFlight || r.recoverable)
}

// readRecord reads the record of (scope, key) for claimRound; nil when it
// is gone meanwhile, or being inserted (claim again). A plain read decides
// a replay, a mismatch or an in-flight answer: a completed record changes
// only once expired, and a record's fingerprint only by an expiry
// overwrite. Only an overwrite (of a renewable record), a takeover or
// marking an abandoned record reads again under the row lock. NOWAIT: a
// record locked by another transaction is being claimed, completed or
// (InTransaction) worked on right now.
func (rc *Receiver) readRecord(ctx context.Context, tx pgx.Tx, scope, key string, fp []byte) (*storedRecord, error) {
	var r storedRecord
	for _, lock := range []string{"", " FOR UPDATE NOWAIT"} {
		err := tx.QueryRow(ctx, `SELECT fingerprint, state, expires_at <= now(),
				coalesce(locked_until <= now(), false), status, headers, body
			FROM `+rc.table+` WHERE scope = $1 AND key = $2`+lock, scope, key).
			Scan(&r.fingerprint, &r.state, &r.expired, &r.recoverable, &r.status, &r.headers, &r.body)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgLockNotAvailable {
			return nil, errLocked // the transaction is aborted: roll it back
		}
		if err != nil {
			return nil, err
		}
		sameRequest := string(r.fingerprint) == string(fp)
		if lock == "" && (r.renewable() || (sameRequest && r.state == stateInFlight && r.recoverable)) {
			continue
		}
		break
	}
	return &r, nil
}

// querier is a pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// complete stores the answer on the record this request claimed; it reports
// false if the record is no longer this request's (taken over after the
// recovery timeout). A record marked outcome_unknown while its handler was
// still running, cut off from the database, is still this request's: its
// answer resolves the unknown outcome.
func (rc *Receiver) complete(ctx context.Context, q querier, scope, key string, token time.Time, a stored) (bool, error) {
	tag, err := q.Exec(ctx, `UPDATE `+rc.table+` SET state = 'completed', locked_until = NULL,
			status = $4, headers = $5, body = $6, completed_at = now()
		WHERE scope = $1 AND key = $2 AND state IN ('in_flight', 'outcome_unknown') AND locked_until = $3`,
		scope, key, token, a.status, map[string][]string(a.headers), a.body)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// release deletes the record this request claimed, so a retry runs the
// handler again (also one marked outcome_unknown meanwhile: the handler
// ended without an effect to keep).
func (rc *Receiver) release(ctx context.Context, scope, key string, token time.Time) error {
	_, err := rc.pool.Exec(ctx, `DELETE FROM `+rc.table+`
		WHERE scope = $1 AND key = $2 AND state IN ('in_flight', 'outcome_unknown') AND locked_until = $3`, scope, key, token)
	return err
}

// lease is a claimed record's fencing token, moved forward by keepAlive.
type lease struct {
	mu      sync.Mutex
	token   time.Time
	stopped bool
}

func (l *lease) get() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.token
}

// keepAlive moves the record's recovery deadline forward every third of
// the recovery timeout while the handler runs, so a handler that runs
// longer than the timeout is not taken over by a retry; a process that dies
// stops extending it and a retry takes over as before. stop ends it and
// waits, after which l holds the final token.
//
// Each extension is bounded (extendTimeout): on a connection that died
// without a word (a partition) it would otherwise hold the lease's lock,
// and stop, and the answer, for as long as the kernel keeps the socket.
// An extension cut off may have committed a token l does not hold; the
// answer then goes out unstored, as when the record was taken over.
func (rc *Receiver) keepAlive(ctx context.Context, scope, key string, l *lease) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(rc.opts.RecoveryTimeout / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			l.mu.Lock()
			if l.stopped {
				l.mu.Unlock()
				return
			}
			var next time.Time
			ectx, ecancel := context.WithTimeout(ctx, extendTimeout(rc.opts.RecoveryTimeout))
			err := rc.pool.QueryRow(ectx, `UPDATE `+rc.table+` SET locked_until = now() + $4::bigint * interval '1 microsecond'
				WHERE scope = $1 AND key = $2 AND state = 'in_flight' AND locked_until = $3 RETURNING locked_until`,
				scope, key, l.token, rc.opts.RecoveryTimeout.Microseconds()).Scan(&next)
			ecancel()
			if err == nil {
				l.token = next
			}
			l.mu.Unlock()
			if errors.Is(err, pgx.ErrNoRows) {
				return // taken over or gone: nothing left to extend
			}
			// Other errors: try again at the next tick.
		}
	}()
	return func() {
		// Under the lock, so no extension is in flight when ctx is
		// cancelled: a cancelled UPDATE might have committed a token that
		// l would then not hold.
		l.mu.Lock()
		l.stopped = true
		l.mu.Unlock()
		cancel()
		<-done
	}
}

// extendTimeout bounds one extension of a record's recovery deadline: a
// third of the recovery timeout (its period), at most 5 s.
func extendTimeout(recovery time.Duration) time.Duration {
	return min(recovery/3, 5*time.Second)
}
