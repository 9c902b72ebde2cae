package receiver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// handlerSavepoint is taken in an InTransaction request's transaction after
// the claim, before the handler runs. A handler whose own statement failed
// leaves the transaction aborted (SQLSTATE 25P02 for every later statement);
// rolling back to the savepoint undoes what the handler wrote and keeps the
// claimed record, so the handler's answer can still be stored.
const handlerSavepoint = "drainer_receiver_handler"

// pgTxFailed is the transaction status (pgconn.PgConn.TxStatus) of a
// connection whose transaction is aborted.
const pgTxFailed = 'E'

// serveInTransaction claims the record and runs next inside one
// transaction that also completes the record (Options.InTransaction): a
// crash, a panic or a 5xx rolls back the record with the handler's effect.
// The claim is bounded by completionTimeout; the handler is not, and the
// completion gets a bound of its own once the handler has returned. Once
// the key is claimed, a client that hangs up cancels nothing (detach).
func (rc *Receiver) serveInTransaction(w http.ResponseWriter, r *http.Request, next http.Handler, scope, key string, fp []byte) {
	conn, tx, res, ok := rc.claimInTransaction(w, r, scope, key, fp)
	if !ok {
		return
	}
	defer conn.Release() // deferred first: runs after the rollback below
	r = detach(r)
	// A no-op once committed; it takes its bound when it runs.
	defer rc.rollbackQuietly(r.Context(), tx)
	rec := newRecorder()
	rc.runHandler(next, rec, r.WithContext(context.WithValue(r.Context(), txKey{}, tx)), func() {
		rc.rollbackQuietly(r.Context(), tx)
	})
	ctx, cancel := rc.storeContext(r.Context())
	defer cancel()
	rc.finishInTransaction(ctx, w, tx, rec, scope, key, res.token)
}

// beginSQL begins the transaction of an InTransaction request, setting
// idle_in_transaction_session_timeout for it (Options.IdleInTransactionTimeout):
// the server ends the session of a service that stopped mid-handler
// (frozen, cut off, gone) after that long, which rolls the record back and
// frees the key. A negative timeout leaves the server's setting.
func beginSQL(idle time.Duration) string {
	if idle < 0 {
		return "BEGIN"
	}
	return fmt.Sprintf("BEGIN; SET LOCAL idle_in_transaction_session_timeout = %d", idle.Milliseconds())
}

// claimInTransaction acquires a connection, begins the transaction of an
// InTransaction request on it, claims the record in it and takes
// handlerSavepoint, all within completionTimeout. It reports false when it
// has answered the request itself (a refusal, or 503) and ended the
// transaction and released the connection; else the caller releases conn
// once tx has ended.
func (rc *Receiver) claimInTransaction(w http.ResponseWriter, r *http.Request, scope, key string, fp []byte) (*pgxpool.Conn, pgx.Tx, claimResult, bool) {
	ctx, cancel := rc.withTimeout(r.Context(), completionTimeout)
	defer cancel()
	conn, err := rc.pool.Acquire(ctx)
	if err != nil {
		rc.logFailure("claim failed: no connection of the pool; answered 503", scope, err)
		rc.writeStoreFailure(w, err, ctx.Err() != nil && r.Context().Err() == nil, unavailableInTransactionDetail)
		return nil, nil, claimResult{}, false
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{BeginQuery: rc.beginSQL})
	if err != nil {
		conn.Release()
		rc.unavailableInTransaction(w, "claim failed; answered 503", scope, err)
		return nil, nil, claimResult{}, false
	}
	res, err := rc.claimIn(ctx, tx, scope, key, fp)
	if err == nil && res.outcome == claimed {
		if _, err = tx.Exec(ctx, "SAVEPOINT "+handlerSavepoint); err == nil {
			if res.abandoned {
				rc.reportAbandoned(scope, key, true)
			}
			return conn, tx, res, true
		}
	} else if err == nil && res.abandoned {
		// The claim marked an abandoned record: commit the mark.
		cctx, ccancel := rc.storeContext(r.Context())
		err = tx.Commit(cctx)
		ccancel()
	}
	rc.rollbackQuietly(r.Context(), tx)
	conn.Release()
	if err != nil {
		rc.unavailableInTransaction(w, "claim failed; answered 503", scope, err)
		return nil, nil, claimResult{}, false
	}
	if res.abandoned {
		rc.reportAbandoned(scope, key, false)
	}
	rc.refuse(w, key, res)
	return nil, nil, res, false
}

// finishInTransaction stores the handler's answer and commits, or rolls
// back, and answers the request. When a statement of the handler's own
// failed, its transaction is aborted and none of its effect can commit:
// an error answer (4xx, or 5xx with StoreServerErrors) is stored after
// rolling back to handlerSavepoint, as the handler's answer to the
// request; an answer below 400 claims an effect that did not happen, so it
// is neither stored nor sent: the client gets 500 transaction-aborted, the
// record is released (rolled back) and a retry runs the handler again.
func (rc *Receiver) finishInTransaction(ctx context.Context, w http.ResponseWriter, tx pgx.Tx, rec *recorder, scope, key string, token time.Time) {
	a := rec.answer(rc.opts.StoreHeaders)
	if a.status >= 500 && !rc.opts.StoreServerErrors {
		rc.rollbackQuietly(ctx, tx)
		rec.flush(w)
		return
	}
	if tx.Conn().PgConn().TxStatus() == pgTxFailed {
		if a.status < 400 {
			rc.rollbackQuietly(ctx, tx)
			rc.logFailure(fmt.Sprintf("the handler answered %d although a statement of its own failed and aborted "+
				"its transaction, so its effect did not happen; nothing committed, answered 500", a.status), scope, nil)
			writeProblem(w, http.StatusInternalServerError, "transaction-aborted", "The handler's transaction failed",
				"a statement the handler ran in its transaction failed, so nothing it did was committed and its answer "+
					"was not stored; retry with the same key", nil)
			return
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+handlerSavepoint); err != nil {
			rc.unavailableInTransaction(w, "rolling back the handler's failed statements failed; nothing committed, answered 503", scope, err)
			return
		}
	}
	if ok, err := rc.complete(ctx, tx, scope, key, token, a); err != nil || !ok {
		if err == nil {
			err = errors.New("the record is no longer this request's")
		}
		rc.unavailableInTransaction(w, "the in-transaction run failed; nothing committed, answered 503", scope, err)
		return
	}
	if err := tx.Commit(ctx); err != nil {
		rc.unavailableInTransaction(w, "the in-transaction run failed; nothing committed, answered 503", scope, err)
		return
	}
	rec.flush(w)
}

// rollbackQuietly rolls tx back (a no-op once it has ended) within a bound
// of its own; a rollback that fails closes the connection, which ends the
// transaction too.
func (rc *Receiver) rollbackQuietly(parent context.Context, tx pgx.Tx) {
	ctx, cancel := rc.storeContext(parent)
	defer cancel()
	_ = tx.Rollback(ctx)
}

// unavailableInTransaction logs a store failure of an InTransaction
// request and answers 503: nothing of it was committed.
func (rc *Receiver) unavailableInTransaction(w http.ResponseWriter, msg, scope string, err error) {
	rc.logFailure(msg, scope, err)
	rc.writeStoreFailure(w, err, false, unavailableInTransactionDetail)
}

// unavailableInTransactionDetail is the detail of a 503 of an
// InTransaction request whose cause is not known better.
const unavailableInTransactionDetail = "the idempotency store failed while processing; nothing was committed, retry with the same key"
