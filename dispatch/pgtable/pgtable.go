package pgtable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/internal/pgreach"
)

// cancelGrace is how long a statement whose context ended may take to
// confirm the cancel request before its connection is cut (and the outcome
// becomes Ambiguous).
const cancelGrace = time.Second

// Statements; %s is the quoted table name.
const (
	insertSQL = `INSERT INTO %s (key, agent_run_id, step_id, tool_name, business_scope, payload)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (key) DO NOTHING RETURNING true`
	// compareSQL runs after a conflict: jsonb equality ignores key order and
	// white space, so a re-encoded but equal payload is still a replay.
	compareSQL = `SELECT payload = $2::jsonb FROM %s WHERE key = $1`
)

// Adapter inserts rows into a recipient table. It is safe for concurrent use.
type Adapter struct {
	cfg        Config
	pool       *pgxpool.Pool
	insertSQL  string
	compareSQL string
	// response is the stored answer of a success or a replay.
	response json.RawMessage
	// bg is the background start of an adapter whose database could not be
	// reached at startup.
	bg dispatch.Background
}

var _ dispatch.Adapter = (*Adapter)(nil)

// New validates cfg (after WithDefaults), opens a pool on cfg.DSN and checks
// that the table can receive rows (see the package documentation); the
// errors name what is missing. A server that cannot be reached is an error
// wrapping dispatch.ErrUnavailable. Close the adapter to close the pool.
func New(ctx context.Context, cfg Config) (*Adapter, error) {
	a, err := open(cfg)
	if err != nil {
		return nil, err
	}
	if err := a.Probe(ctx); err != nil {
		a.pool.Close()
		return nil, err
	}
	return a, nil
}

// open validates cfg (after WithDefaults) and opens the adapter's pool,
// which connects on first use: Probe is the first contact.
func open(cfg Config) (*Adapter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("dsn: %w", redactParseError(err))
	}
	switch {
	case cfg.MaxConns > 0:
		pc.MaxConns = cfg.MaxConns
	case !strings.Contains(cfg.DSN, "pool_max_conns"):
		pc.MaxConns = DefaultMaxConns
	}
	if pc.ConnConfig.RuntimeParams["application_name"] == "" {
		pc.ConnConfig.RuntimeParams["application_name"] = "drainer"
	}
	// On a deadline, ask the server to cancel the statement instead of only
	// closing the socket: a statement that is cancelled and says so has not
	// happened (Retry), where a cut connection leaves it running (Ambiguous).
	pc.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: cancelGrace}
	}
	// Its context only seeds the connections the pool opens itself.
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", redactParseError(err))
	}
	return newAdapter(pool, cfg), nil
}

// Probe checks, within the timeout, that the table can receive rows. An
// error wrapping dispatch.ErrUnavailable says the server could not be
// reached (or is starting, or full); any other names what is wrong with
// the table, or the server's refusal (credentials, a missing database).
func (a *Adapter) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	err := checkTable(ctx, a.pool, a.quotedTable())
	if err != nil && pgreach.Unreachable(err) {
		return dispatch.MarkUnavailable(err)
	}
	return err
}

// StartInBackground holds the adapter's rows back (dispatch.NotReady: no
// attempt consumed, the breaker not counting) until Probe succeeds, trying
// again with a doubling delay up to 5 s. Close stops it.
func (a *Adapter) StartInBackground(log *slog.Logger) {
	a.bg.Start(log, "postgres", "database", a.Probe)
}

// Ready reports whether the adapter is not waiting for a background start.
func (a *Adapter) Ready() bool { return !a.bg.Waiting() }

// NotReadyReason says why the adapter is not ready (Ready false): its
// provider unreachable since startup, or refusing the start.
func (a *Adapter) NotReadyReason() string { return a.bg.Why("the database") }

// newAdapter builds the adapter on an open pool; cfg is valid.
func newAdapter(pool *pgxpool.Pool, cfg Config) *Adapter {
	a := &Adapter{cfg: cfg, pool: pool}
	table := a.quotedTable()
	a.insertSQL = fmt.Sprintf(insertSQL, table)
	a.compareSQL = fmt.Sprintf(compareSQL, table)
	a.response, _ = json.Marshal(struct {
		Inserted bool   `json:"inserted"`
		Table    string `json:"table"`
	}{true, cfg.Table})
	return a
}

func (a *Adapter) quotedTable() string {
	ident, _ := parseTable(a.cfg.Table) // validated
	return ident.Sanitize()
}

// Close stops a background start and closes the pool, waiting for
// connections in use to be released.
func (a *Adapter) Close() error {
	a.bg.Stop()
	a.pool.Close()
	return nil
}

// Dispatch inserts the row (key, tuple fields, payload). A new key is
// Success; a key already present with an equal payload (jsonb equality) is
// Replay; with another payload, Terminal (payload_mismatch). Both answers
// carry the response {"inserted": true, "table": "<table>"}. Errors are
// classified by classifyError. Until the database has answered once since
// startup (a background start), the row is held back: dispatch.NotReady.
func (a *Adapter) Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result {
	if ctx.Err() != nil {
		return notSent(ctx, context.Cause(ctx))
	}
	if a.bg.Waiting() {
		return dispatch.NotReady(errors.New("postgres: " + a.bg.Why("the database")))
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	conn, err := a.pool.Acquire(ctx)
	if err != nil {
		return notSent(ctx, err)
	}
	defer conn.Release()
	t := m.Tuple
	var inserted bool
	err = conn.QueryRow(ctx, a.insertSQL, m.Key, t.AgentRunID, t.StepID, t.ToolName, t.BusinessScope, string(m.Payload)).Scan(&inserted)
	switch {
	case err == nil:
		return dispatch.Result{Outcome: dispatch.Success, Reason: ReasonInserted, Response: a.response}
	case !errors.Is(err, pgx.ErrNoRows):
		return classifyError(ctx, "insert", err)
	}
	var same bool
	err = conn.QueryRow(ctx, a.compareSQL, m.Key, string(m.Payload)).Scan(&same)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: ReasonConflictGone,
			Err: errors.New("postgres: the key's row was deleted between the insert and the comparison")}
	case err != nil:
		return classifyError(ctx, "compare", err)
	case !same:
		return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: dispatch.ReasonPayloadMismatch,
			Err: fmt.Errorf("postgres: table %s already holds the key with another payload", a.cfg.Table)}
	}
	return dispatch.Result{Outcome: dispatch.Replay, Reason: dispatch.ReasonReplay, Response: a.response}
}

// redactParseError drops the connection string that pgconn quotes in parse
// errors (with the password masked, but with the user and the host),
// keeping what is wrong with it.
func redactParseError(err error) error {
	pe, ok := errors.AsType[*pgconn.ParseConfigError](err)
	if !ok {
		return err
	}
	const generic = "cannot parse the connection string"
	rest, ok := strings.CutPrefix(pe.Error(), "cannot parse `")
	if i := strings.LastIndex(rest, "`: "); ok && i >= 0 {
		return errors.New(generic + ": " + rest[i+len("`: "):])
	}
	return errors.New(generic)
}
