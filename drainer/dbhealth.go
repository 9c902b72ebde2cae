package drainer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5/pgconn"
)

// dbQuietFor is how often, at most, one subsystem logs its own failure
// while the database is down: the outage itself is one line when it
// starts and one when it ends.
const dbQuietFor = time.Minute

// dbHealth turns the database errors of the engine's subsystems (claim,
// completions, listener, wake gate, reclaimer, snapshots, retention,
// rotation, pauses, deferrals) into one line when the database stops
// answering and one when it is back, with how long it was down; meanwhile
// each subsystem logs its own failure at most once per dbQuietFor. An
// error the database answered (a refused statement) is not an outage: the
// subsystem logs it as before.
//
// Each report says when the work it is about began (a statement's send,
// a wake-up connection's last sign of life). An answer to work begun
// before the outage began does not end it (ok), and a failure of work
// begun before the last outage ended does not open another (failed): both
// may arrive late, on the far side of the outage's edge, and each would
// otherwise log the outage twice.
type dbHealth struct {
	log  *slog.Logger
	down atomic.Bool

	mu     sync.Mutex
	since  time.Time            // when the outage began
	backAt time.Time            // when the last outage ended
	logged map[string]time.Time // subsystem → its last line during the outage
	// readOnly: the outage is a database that answers but refuses every
	// write (readOnly), not one that cannot be reached.
	readOnly bool
}

// DatabaseDown reports whether the engine's database is down now (its
// subsystems saw it stop answering, or refuse every write, and nothing
// has succeeded since), and since when.
func (e *Engine) DatabaseDown() (bool, time.Time) {
	h := e.db
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down.Load(), h.since
}

func newDBHealth(log *slog.Logger) *dbHealth {
	return &dbHealth{log: log, logged: map[string]time.Time{}}
}

// failed records that a subsystem's work begun at sent failed, and reports
// whether the subsystem should log err itself. A failure of work begun
// before the last outage ended belongs to that outage: it opens no other,
// and its subsystem logs it only if it has not logged within dbQuietFor.
//
// A database that refuses every write (readOnly: the daemon's role or
// database has default_transaction_read_only on, or the server is a
// standby) is an outage of the same kind: nothing can be claimed or
// settled until it accepts writes, and it says so once.
func (h *dbHealth) failed(subsystem string, sent time.Time, err error) bool {
	refusesWrites := readOnly(err)
	if !refusesWrites && !unreachable(err) {
		return true
	}
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down.Load() && !sent.Before(h.backAt) {
		h.down.Store(true)
		h.since, h.readOnly = now, refusesWrites
		clear(h.logged)
		h.logged[subsystem] = now
		if refusesWrites {
			h.log.Error("the database refuses writes (a read-only transaction): default_transaction_read_only is on for drainer's role or its database, or the server is a standby; nothing is claimed or settled until it accepts writes; every subsystem retries, each logging at most once a minute",
				"subsystem", subsystem, "err", err)
			return false
		}
		h.log.Error("database unreachable: statements fail; every subsystem retries, each logging at most once a minute until it is back",
			"subsystem", subsystem, "err", err)
		return false
	}
	if now.Sub(h.logged[subsystem]) < dbQuietFor {
		return false
	}
	h.logged[subsystem] = now
	return true
}

// ok records that statements sent at sent or later succeeded, one of them
// a write: after an outage, one line says the database is back and how
// long it was not. A statement sent before the outage began proves nothing
// about now: it may have been answered just before the connection was
// lost, after another subsystem had already seen the loss, and ending the
// outage for it would log the outage twice.
func (h *dbHealth) ok(sent time.Time) { h.answered(sent, true) }

// okMaybeRead is ok for work that may not have written (a snapshot whose
// turn another replica had): it ends an outage of a database that could
// not be reached, not one of a database that refuses writes.
func (h *dbHealth) okMaybeRead(sent time.Time) { h.answered(sent, false) }

func (h *dbHealth) answered(sent time.Time, wrote bool) {
	if !h.down.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down.Load() && !sent.Before(h.since) && (wrote || !h.readOnly) {
		h.down.Store(false)
		h.backAt = time.Now()
		if h.readOnly {
			h.log.Info("the database accepts writes again", "refused_for", h.backAt.Sub(h.since).Round(time.Millisecond))
			return
		}
		h.log.Info("database back", "down_for", h.backAt.Sub(h.since).Round(time.Millisecond))
	}
}

// readOnly reports whether err is the database refusing a write in a
// read-only transaction (SQLSTATE 25006).
func readOnly(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25006"
}

// unreachable reports whether err says the database could not be reached
// or the connection was lost, rather than a statement refused
// (store.ConnectionLost), or that it did not answer in time.
func unreachable(err error) bool {
	return store.ConnectionLost(err) || err != nil && errors.Is(err, context.DeadlineExceeded)
}
