package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SessionDefaults sets what every connection of drainer's runs with unless
// the database URL says otherwise (as a parameter of its own, or as
// `options=-c name=value`):
//
//   - application_name drainer;
//   - jit off: short statements over a few hundred rows; compiling them,
//     once an estimate crosses jit_above_cost, costs more than running them;
//   - idle_in_transaction_session_timeout (IdleInTransaction), so that a
//     session whose replica was cut off in the middle of a transaction (a
//     partition, a hung pooler: the server's side of the connection stays
//     open) does not hold its locks, its snapshot or the backlog snapshot's
//     turn for good;
//   - default_transaction_isolation read committed: drainer's transactions
//     are written for it (a statement that waited on a lock sees what the
//     lock's holder committed: an ordered scope's next row is made due the
//     moment the one before settles); a database whose default is
//     repeatable read or serializable would turn those statements into
//     serialization failures retried for up to a scope hold (a minute);
//   - statement_timeout, lock_timeout and idle_session_timeout 0: each of
//     drainer's statements is bounded by its own deadline, and its
//     listening and pooled sessions sit idle between uses; a database's
//     default meant for its applications' sessions (50 ms, say) would time
//     out its claims and completions of a few hundred rows, and close the
//     session a wake-up listens on.
//
// Each new connection then checks that its session holds them, and is
// refused, naming the cause, when something between drainer and
// PostgreSQL dropped them (see PoolerHint).
func SessionDefaults(cc *pgx.ConnConfig) {
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	set := optionsSet(cc.RuntimeParams["options"])
	want := map[string]string{}
	for _, d := range sessionDefaults {
		if cc.RuntimeParams[d.name] == "" && !set[d.name] {
			cc.RuntimeParams[d.name] = d.value
			if d.setting != "" {
				want[d.name] = d.setting
			}
		}
	}
	if len(want) > 0 {
		cc.AfterConnect = checkSession(want, cc.AfterConnect)
	}
}

// sessionDefaults are SessionDefaults' settings.
// setting is the value pg_settings.setting gives once it holds (none:
// not checked; a pooler may set application_name itself).
var sessionDefaults = []struct{ name, value, setting string }{
	{"application_name", "drainer", ""},
	{"jit", "off", "off"},
	{"idle_in_transaction_session_timeout", strconv.Itoa(int(IdleInTransaction.Milliseconds())), strconv.Itoa(int(IdleInTransaction.Milliseconds()))},
	{"default_transaction_isolation", "read committed", "read committed"},
	{"statement_timeout", "0", "0"},
	{"lock_timeout", "0", "0"},
	{"idle_session_timeout", "0", "0"},
}

// optionsSet returns the settings a connection's options parameter sets
// (`-c name=value`, `-cname=value` or `--name=value`, dashes in a name
// read as underscores, as the server reads them).
func optionsSet(options string) map[string]bool {
	set := map[string]bool{}
	fields := strings.Fields(options)
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		switch {
		case f == "-c" && i+1 < len(fields):
			i++
			f = fields[i]
		case strings.HasPrefix(f, "--"):
			f = f[2:]
		case strings.HasPrefix(f, "-c"):
			f = f[2:]
		default:
			continue
		}
		name, _, _ := strings.Cut(f, "=")
		set[strings.ToLower(strings.ReplaceAll(name, "-", "_"))] = true
	}
	return set
}

// IdleInTransaction is how long the server lets a session of drainer's
// sit in a transaction with no statement running before it ends the
// session. drainer's transactions send their statements back to back; one
// idle this long lost its client.
const IdleInTransaction = time.Minute

// ConnectBeside opens a connection of its own beside pool (a listener's,
// the wake gate's), configured as the pool's connections are: through the
// pool's BeforeConnect, so credentials read anew at each connect (a
// rotated credentials file) apply to it as to the pool, and named
// drainer-ROLE in pg_stat_activity unless the pool names its connections
// otherwise than drainer's default.
func ConnectBeside(ctx context.Context, pool *pgxpool.Pool, role string) (*pgx.Conn, error) {
	pc := pool.Config()
	cc := pc.ConnConfig
	if app := cc.RuntimeParams["application_name"]; app == "" || app == "drainer" {
		cc.RuntimeParams["application_name"] = "drainer-" + role
	}
	if pc.BeforeConnect != nil {
		if err := pc.BeforeConnect(ctx, cc); err != nil {
			return nil, err
		}
	}
	if _, ok := ctx.Deadline(); !ok && cc.ConnectTimeout == 0 {
		// A caller that forgot to bound it: a server that accepts and
		// never answers must not hold the connect for ever.
		cc.ConnectTimeout = besideConnectWait
	}
	return pgx.ConnectConfig(ctx, cc)
}

// besideConnectWait bounds ConnectBeside's connect when neither its context
// nor the URL's connect_timeout does.
const besideConnectWait = 10 * time.Second

// WakeSlots is how many daemons can wait for notifications at once as
// sentinels (see migrations/code/functions/notify_outbox.sql). A producer
// checks every slot; a daemon that finds none free waits on the others'
// notifications.
const WakeSlots = 8

// The wake gate's session-level advisory locks: a slot's seat (daemons
// only: which daemon owns the slot) and its wake lock (held exclusively by
// the sentinel while it sleeps; producers try it shared). The key formula
// is the one of the outbox's notify trigger.
const (
	wakeSeatSQL    = `SELECT pg_try_advisory_lock(hashtextextended($1 || '.wake_seat.' || $2::int, 0))`
	wakeReleaseSQL = `SELECT pg_advisory_unlock(hashtextextended($1 || '.wake.' || $2::int, 0)),
	        pg_advisory_unlock(hashtextextended($1 || '.wake_seat.' || $2::int, 0))`
	wakeSeatReleaseSQL = `SELECT pg_advisory_unlock(hashtextextended($1 || '.wake_seat.' || $2::int, 0))`
	wakeHoldSQL        = `SELECT pg_advisory_lock(hashtextextended($1 || '.wake.' || $2::int, 0))`
)

// TakeWakeSeat takes the first free seat of the wake gate on conn's
// session and returns its slot, or -1 when every seat is taken.
func (s *Store) TakeWakeSeat(ctx context.Context, conn *pgx.Conn) (int, error) {
	for slot := range WakeSlots {
		var ok bool
		if err := conn.QueryRow(ctx, wakeSeatSQL, s.schema, slot).Scan(&ok); err != nil {
			return -1, fmt.Errorf("wake gate seat: %w", err)
		}
		if ok {
			return slot, nil
		}
	}
	return -1, nil
}

// HoldWake takes slot's wake lock exclusively on conn's session, waiting at
// most wait for the producers that hold it shared (their transactions
// enqueued without notifying) to finish. It reports whether it holds the
// lock; on false the seat stays taken (ReleaseWakeSeat gives it back).
// While it waits, producers find the lock wanted and notify.
func (s *Store) HoldWake(ctx context.Context, conn *pgx.Conn, slot int, wait time.Duration) (bool, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SELECT set_config('lock_timeout', $1, true)", fmt.Sprintf("%dms", max(wait.Milliseconds(), 1)))
	b.Queue(wakeHoldSQL, s.schema, slot)
	b.Queue("COMMIT")
	err := conn.SendBatch(ctx, b).Close()
	if err == nil {
		return true, nil
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" { // lock_not_available
		return false, fmt.Errorf("wake gate hold: %w", err)
	}
	if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
		return false, fmt.Errorf("wake gate hold: %w", err)
	}
	return false, nil
}

// ReleaseWakeSeat gives back slot's seat, taken without its wake lock.
func (s *Store) ReleaseWakeSeat(ctx context.Context, conn *pgx.Conn, slot int) error {
	if _, err := conn.Exec(ctx, wakeSeatReleaseSQL, s.schema, slot); err != nil {
		return fmt.Errorf("wake gate seat release: %w", err)
	}
	return nil
}

// ReleaseWake gives back slot's wake lock and seat: producers stop
// notifying for this daemon.
func (s *Store) ReleaseWake(ctx context.Context, conn *pgx.Conn, slot int) error {
	if _, err := conn.Exec(ctx, wakeReleaseSQL, s.schema, slot); err != nil {
		return fmt.Errorf("wake gate release: %w", err)
	}
	return nil
}

// WakePosition reads the claim position an insert's notification carries
// (migrations/code/functions/notify_outbox.sql): "<due in µs since the
// epoch>:<seq>". Other notifications on the channel carry none (ok is
// false): they ask for a pass from the first due row.
func WakePosition(payload string) (p Position, ok bool) {
	due, seq, found := strings.Cut(payload, ":")
	if !found {
		return Position{}, false
	}
	us, err1 := strconv.ParseInt(due, 10, 64)
	n, err2 := strconv.ParseInt(seq, 10, 64)
	if err1 != nil || err2 != nil {
		return Position{}, false
	}
	return Position{Due: time.UnixMicro(us), Seq: n}, true
}

// NextNotification waits for the next notification on conn, a connection
// that LISTENs. A connection quiet for quiet is pinged, and given up (its
// error returned) when no answer comes within pingWait: one that died
// without a word (a restart, an idle-connection killer, a network drop)
// would otherwise leave its listener deaf. It returns ctx's error once ctx
// ends.
func NextNotification(ctx context.Context, conn *pgx.Conn, quiet, pingWait time.Duration) (*pgconn.Notification, error) {
	for {
		wctx, cancel := context.WithTimeout(ctx, quiet)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err == nil {
			return n, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		pctx, cancel := context.WithTimeout(ctx, pingWait)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return nil, err
		}
	}
}
