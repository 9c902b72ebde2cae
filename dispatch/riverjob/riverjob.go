package riverjob

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
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivershared/riversharedmaintenance"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/internal/pgreach"
)

// Adapter inserts one River job per outbox row. It is safe for concurrent
// use.
type Adapter struct {
	cfg    Config
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
	opts   *river.InsertOpts
	// bg is the background start of an adapter whose database could not be
	// reached at startup.
	bg dispatch.Background
}

var (
	_ dispatch.Adapter  = (*Adapter)(nil)
	_ dispatch.KeyTTLer = (*Adapter)(nil)
)

// New validates cfg (after WithDefaults), opens a connection pool to the
// database and checks that River's migrations are applied in cfg.Schema.
// The River client it builds only inserts: it has no queues and no workers.
// A server that cannot be reached is an error wrapping
// dispatch.ErrUnavailable. Errors never quote the DSN.
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

// open validates cfg (after WithDefaults) and builds the adapter: its pool,
// which connects on first use, and its River client. Probe is the first
// contact.
func open(cfg Config) (*Adapter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	poolCfg, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		// pgx quotes the connection string, redacting the password on a
		// best-effort basis only: say nothing about it.
		return nil, errors.New("dsn: not a valid PostgreSQL connection string (URL or key=value)")
	}
	// Its context only seeds the connections the pool opens itself.
	pool, err := pgxpool.NewWithConfig(context.Background(), poolCfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", redactConnectError(err))
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: cfg.Schema, Logger: cfg.Logger})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("river client: %w", err)
	}
	return &Adapter{
		cfg:    cfg,
		pool:   pool,
		client: client,
		opts:   &river.InsertOpts{Queue: cfg.Queue, UniqueOpts: uniqueOpts()},
	}, nil
}

// startupCheckTimeout bounds Probe's connect and migration check at least
// this long: the adapter's timeout bounds a dispatch, and a loaded host or
// a cold server may take longer to answer the first time.
const startupCheckTimeout = 30 * time.Second

// Probe connects and checks River's migrations. An error wrapping
// dispatch.ErrUnavailable says the server could not be reached (or is
// starting, or full); any other is its refusal (credentials, a missing
// database) or River's tables missing or out of date.
func (a *Adapter) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, max(a.cfg.Timeout, startupCheckTimeout))
	defer cancel()
	err := a.pool.Ping(ctx)
	switch _, connect := errors.AsType[*pgconn.ConnectError](err); {
	case connect:
		err = redactConnectError(err) // "connect to the database: …"
	case err != nil:
		err = fmt.Errorf("connect to the database: %w", err)
	default:
		err = checkMigrated(ctx, riverpgxv5.New(a.pool), a.cfg)
	}
	if err != nil && pgreach.Unreachable(err) {
		return dispatch.MarkUnavailable(err)
	}
	return err
}

// StartInBackground holds the adapter's rows back (dispatch.NotReady: no
// attempt consumed, the breaker not counting) until Probe succeeds, trying
// again with a doubling delay up to 5 s. Close stops it.
func (a *Adapter) StartInBackground(log *slog.Logger) {
	a.bg.Start(log, "river", "database", a.Probe)
}

// Ready reports whether the adapter is not waiting for a background start.
func (a *Adapter) Ready() bool { return !a.bg.Waiting() }

// NotReadyReason says why the adapter is not ready (Ready false): its
// provider unreachable since startup, or refusing the start.
func (a *Adapter) NotReadyReason() string { return a.bg.Why("the database") }

// checkMigrated fails unless every River migration this build knows is
// applied in cfg.Schema: inserting needs the current river_job table and its
// unique index.
func checkMigrated(ctx context.Context, driver *riverpgxv5.Driver, cfg Config) error {
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: cfg.Schema, Logger: cfg.Logger})
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	res, err := migrator.Validate(ctx, nil)
	if err != nil {
		return fmt.Errorf("check River's migrations in %s: %w", schemaDesc(cfg.Schema), redactConnectError(err))
	}
	if !res.OK {
		return fmt.Errorf("River's tables are missing or out of date in %s (%s): run rivermigrate, or `river migrate-up --database-url … --schema …`, with River %s or later",
			schemaDesc(cfg.Schema), strings.Join(res.Messages, "; "), riverVersion)
	}
	return nil
}

// riverVersion is the River release this adapter is built with.
const riverVersion = "v0.51.1"

func schemaDesc(schema string) string {
	if schema == "" {
		return "the search path"
	}
	return fmt.Sprintf("schema %q", schema)
}

// Close stops a background start and closes the connection pool, waiting
// for connections in use to be returned. Dispatch must not be called
// afterwards.
func (a *Adapter) Close() error {
	a.bg.Stop()
	a.pool.Close()
	return nil
}

// KeyTTL returns how long River keeps a row's job, and so how long a second
// dispatch is recognised as a duplicate: River's default retention of
// completed and cancelled jobs (24 hours; discarded jobs are kept 7 days).
// The retention is a setting of the River client that runs the workers,
// which the drainer cannot see: users whose workers keep jobs for less (or
// more) set key_ttl on the adapter.
func (a *Adapter) KeyTTL(context.Context) (time.Duration, error) {
	return min(riversharedmaintenance.CompletedJobRetentionPeriodDefault,
		riversharedmaintenance.CancelledJobRetentionPeriodDefault), nil
}

// Dispatch inserts the row's job in its own transaction and classifies the
// outcome: Success with {"job_id", "queue", "kind"} for a new job, Replay
// with the existing job's when one already holds the key, Terminal if that
// job carries another payload. Until the database has answered once since
// startup (a background start), the row is held back: dispatch.NotReady.
func (a *Adapter) Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result {
	if !json.Valid(m.Payload) {
		return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: ReasonInvalidArgs,
			Err: errors.New("payload is not valid JSON")}
	}
	if a.bg.Waiting() {
		return dispatch.NotReady(errors.New("river: " + a.bg.Why("the database")))
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	if err := ctx.Err(); err != nil {
		return classify(ctx, phaseBegin, err)
	}
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		return classify(ctx, phaseBegin, err)
	}
	defer func() {
		// After a commit this is a no-op; after a failure it ends the
		// transaction (or the connection, if it is broken).
		rbCtx, rbCancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer rbCancel()
		_ = tx.Rollback(rbCtx)
	}()
	res, err := a.client.InsertTx(ctx, tx, newJobArgs(a.cfg.JobKind, m), a.opts)
	if err != nil {
		return classify(ctx, phaseInsert, err)
	}
	if res.UniqueSkippedAsDuplicate && !samePayload(res.Job.EncodedArgs, m.Payload) {
		return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: dispatch.ReasonPayloadMismatch,
			Err: fmt.Errorf("river job %d already holds this key with another payload", res.Job.ID)}
	}
	if !res.UniqueSkippedAsDuplicate {
		if err := tx.Commit(ctx); err != nil {
			return classify(ctx, phaseCommit, err)
		}
	}
	r := dispatch.Result{Outcome: dispatch.Success, Reason: ReasonInserted, Response: jobResponse(res.Job.ID, res.Job.Queue, res.Job.Kind)}
	if res.UniqueSkippedAsDuplicate {
		r.Outcome, r.Reason = dispatch.Replay, dispatch.ReasonReplay
	}
	return r
}

func jobResponse(id int64, queue, kind string) json.RawMessage {
	b, _ := json.Marshal(struct {
		JobID int64  `json:"job_id"`
		Queue string `json:"queue"`
		Kind  string `json:"kind"`
	}{id, queue, kind}) // cannot fail
	return b
}
