package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schemaMark is the comment bench puts on the schemas it creates. A schema
// with this comment is bench's to drop; any other schema of the same name is
// left alone and the run refused.
const schemaMark = "drainer bench scratch schema: dropped by drainer bench"

// applicationName shows bench's connections in pg_stat_activity;
// replicaApplicationName marks those of the replicas (engines, River
// clients, replica processes), whose wait events and exits bench watches.
const (
	applicationName        = "drainer-bench"
	replicaApplicationName = "drainer-bench-replica"
)

// setup connects, creates and migrates the schemas and opens the replica pools.
func (r *runner) setup(ctx context.Context, url string) error {
	r.url, r.external = url, r.opts.DatabaseURL != ""
	r.schema, r.riverSchema = r.opts.Schema, r.opts.Schema+RiverSchemaSuffix
	// The engine's default claim batch.
	r.batchSize = drainer.Config{Workers: r.opts.Workers}.WithDefaults().BatchSize

	admin, err := newPool(ctx, url, 8)
	if err != nil {
		return err
	}
	r.admin = admin
	if err := admin.QueryRow(ctx, "SELECT current_setting('server_version')").Scan(&r.pgVersion); err != nil {
		return fmt.Errorf("read server version: %w", err)
	}
	r.logf("PostgreSQL %s; schemas %s and %s", r.pgVersion, r.schema, r.riverSchema)
	for _, s := range []string{r.schema, r.riverSchema} {
		if err := r.createSchema(ctx, s); err != nil {
			return err
		}
	}
	conn, err := admin.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	_, err = migrations.Migrate(ctx, conn.Conn(), r.schema, nil)
	conn.Release()
	if err != nil {
		return fmt.Errorf("migrate %s: %w", r.schema, err)
	}
	if err := migrateRiver(ctx, admin, r.riverSchema); err != nil {
		return err
	}
	// The audit triggers are on as shipped; say so from the catalog, not by assumption.
	err = admin.QueryRow(ctx, `SELECT count(*) = 2 AND bool_and(tgenabled <> 'D')
	    FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname IN ('queue_audit_insert', 'queue_audit_update')`,
		r.schema+".queue").Scan(&r.audit)
	if err != nil {
		return fmt.Errorf("read audit triggers: %w", err)
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf(minimalTableSQL+insertShapeSQL, r.schema)); err != nil {
		return fmt.Errorf("create the ceiling's and the insert's tables: %w", err)
	}
	return r.openPools(ctx)
}

// openPools opens one pool per replica, sized as `drainer run` sizes its
// pool: min(workers/4+8, 64) connections (internal/daemon).
func (r *runner) openPools(ctx context.Context) error {
	for range r.opts.Replicas {
		p, err := newReplicaPool(ctx, r.url, int32(replicaPoolSize(r.opts.Workers)))
		if err != nil {
			return err
		}
		r.pools = append(r.pools, p)
	}
	return nil
}

// replicaPoolSize is the pool size `drainer run` gives workers workers.
func replicaPoolSize(workers int) int { return min(workers/4+8, 64) }

// closePools closes the replica pools and waits until the server has seen
// their connections go: a backend reports its statistics
// (pg_stat_database) when it exits, so xact counts are complete after this.
func (r *runner) closePools(ctx context.Context) error {
	for _, p := range r.pools {
		p.Close()
	}
	r.pools = nil
	return r.awaitReplicaBackendsGone(ctx)
}

// awaitReplicaBackendsGone waits until no replica connection is left on the server.
func (r *runner) awaitReplicaBackendsGone(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var n int
	err := waitFor(ctx, 5*time.Millisecond, func() (bool, error) {
		err := r.admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
			replicaApplicationName).Scan(&n)
		return n == 0, err
	})
	if err != nil {
		return fmt.Errorf("wait for %d replica connections to close: %w", n, err)
	}
	return nil
}

// newPool opens and pings a pool of at most maxConns connections.
func newPool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	return newPoolNamed(ctx, url, maxConns, applicationName)
}

// newReplicaPool is newPool for a replica's connections.
func newReplicaPool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	return newPoolNamed(ctx, url, maxConns, replicaApplicationName)
}

func newPoolNamed(ctx context.Context, url string, maxConns int32, name string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	pc.MaxConns = maxConns
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	pc.ConnConfig.RuntimeParams["application_name"] = name
	pc.ConnConfig.RuntimeParams["jit"] = "off" // as drainer run's pool
	p, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, fmt.Errorf("connect to %s:%d: %w", pc.ConnConfig.Host, pc.ConnConfig.Port, err)
	}
	return p, nil
}

// createSchema creates schema for bench, first dropping one a previous
// (interrupted) run left behind. A schema bench did not create is refused.
func (r *runner) createSchema(ctx context.Context, schema string) error {
	var exists bool
	var comment *string
	err := r.admin.QueryRow(ctx, `SELECT true, obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = $1`,
		schema).Scan(&exists, &comment)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("look up schema %s: %w", schema, err)
	}
	if exists {
		if comment == nil || *comment != schemaMark {
			return fmt.Errorf("schema %s exists and was not created by drainer bench: refusing to touch it; pass --schema to pick another name", schema)
		}
		r.logf("dropping schema %s left by an earlier bench run", schema)
		if _, err := r.admin.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			return fmt.Errorf("drop schema %s: %w", schema, err)
		}
	}
	_, err = r.admin.Exec(ctx, fmt.Sprintf("CREATE SCHEMA %s; COMMENT ON SCHEMA %s IS '%s'", schema, schema, schemaMark))
	if err != nil {
		return fmt.Errorf("create schema %s: %w", schema, err)
	}
	r.created = append(r.created, schema)
	return nil
}

// close closes the pools and drops the schemas bench created.
func (r *runner) close(ctx context.Context) error {
	for _, p := range r.pools {
		p.Close()
	}
	r.pools = nil
	if r.admin == nil {
		return nil
	}
	defer r.admin.Close()
	var errs []error
	// On a throwaway cluster the schemas go with it.
	if r.external {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for _, s := range r.created {
			if _, err := r.admin.Exec(ctx, "DROP SCHEMA "+s+" CASCADE"); err != nil {
				errs = append(errs, fmt.Errorf("drop schema %s: %w", s, err))
			}
		}
	}
	r.created = nil
	return errors.Join(errs...)
}

// setAudit enables or disables the audit: drain_no_audit_rows_per_s is the
// drain with the audit triggers disabled (ALTER TABLE … DISABLE TRIGGER)
// and, in the bench's scratch schema only, complete_rows replaced by a
// variant that writes no entries (unaudited); enabling puts the shipped
// definition back.
func (r *runner) setAudit(ctx context.Context, on bool) error {
	verb := "DISABLE"
	if on {
		verb = "ENABLE"
	}
	_, err := r.admin.Exec(ctx, fmt.Sprintf("ALTER TABLE %[1]s.queue %[2]s TRIGGER queue_audit_insert, %[2]s TRIGGER queue_audit_update", r.schema, verb))
	if err != nil {
		return fmt.Errorf("%s audit triggers: %w", strings.ToLower(verb), err)
	}
	def, err := migrations.Definition(r.schema, completeRows)
	if err != nil {
		return err
	}
	if !on {
		if def, err = unaudited(def); err != nil {
			return err
		}
	}
	if _, err := r.admin.Exec(ctx, def); err != nil {
		return fmt.Errorf("install %s (audit %s): %w", completeRows, strings.ToLower(verb)+"d", err)
	}
	r.logf("audit %sd", strings.ToLower(verb))
	return nil
}

// completeRows is the completion's definition, which setAudit swaps.
const completeRows = "functions/complete_rows.sql"

// unaudited cuts the audit out of complete_rows: the head's assignment,
// the entry's fields, the entries.
func unaudited(def string) (string, error) {
	for _, cut := range [][2]string{
		{",\n           audit_head = CASE", "\n      FROM unnest("},
		{"\n     CROSS JOIN LATERAL (SELECT p.status IS DISTINCT FROM", "\n     WHERE o.seq = u.seq"},
		{",\n           e.changed", "\n    ), ins AS ("},
		{"\n    ), ins AS (", "\n    )\n    SELECT d.seq, d.run FROM done d"},
	} {
		from, to := strings.Index(def, cut[0]), strings.Index(def, cut[1])
		if from < 0 || to < from {
			return "", fmt.Errorf("%s changed shape: update the bench's unaudited variant", completeRows)
		}
		def = def[:from] + def[to:]
	}
	return def, nil
}

// serverCost is what a phase cost the server: committed transactions and WAL bytes.
type serverCost struct {
	rows, xacts, walBytes int64
}

func (c *serverCost) add(d serverCost) {
	c.rows, c.xacts, c.walBytes = c.rows+d.rows, c.xacts+d.xacts, c.walBytes+d.walBytes
}

func (c serverCost) xactsPerRow() float64 {
	if c.rows == 0 {
		return 0
	}
	return float64(c.xacts) / float64(c.rows)
}

func (c serverCost) walPerRow() float64 {
	if c.rows == 0 {
		return 0
	}
	return float64(c.walBytes) / float64(c.rows)
}

// serverMark is a reading of the counters serverCost is the difference of.
type serverMark struct {
	xacts int64
	lsn   string
}

func (r *runner) mark(ctx context.Context) (serverMark, error) {
	var m serverMark
	err := r.admin.QueryRow(ctx, `SELECT xact_commit, pg_current_wal_lsn()::text FROM pg_stat_database WHERE datname = current_database()`).
		Scan(&m.xacts, &m.lsn)
	if err != nil {
		return m, fmt.Errorf("read xact_commit and WAL position: %w", err)
	}
	return m, nil
}

// since returns the cost of rows rows since m.
func (r *runner) since(ctx context.Context, m serverMark, rows int) (serverCost, error) {
	var c serverCost
	err := r.admin.QueryRow(ctx, `SELECT xact_commit - $1, pg_wal_lsn_diff(pg_current_wal_lsn(), $2::pg_lsn)::bigint
	    FROM pg_stat_database WHERE datname = current_database()`, m.xacts, m.lsn).Scan(&c.xacts, &c.walBytes)
	if err != nil {
		return c, fmt.Errorf("read xact_commit and WAL position: %w", err)
	}
	c.rows = int64(rows)
	return c, nil
}

// reset empties the outbox and everything its rows left behind, so each
// phase starts from the same state.
func (r *runner) reset(ctx context.Context) error {
	s := r.schema
	_, err := r.admin.Exec(ctx, fmt.Sprintf("TRUNCATE %[1]s.queue, %[1]s.intents, %[1]s.audit, %[1]s.audit_anchors, %[1]s.keys, %[1]s.runs", s))
	if err != nil {
		return fmt.Errorf("reset %s: %w", s, err)
	}
	return nil
}

// settle makes a filled table's state independent of how it was filled:
// vacuumed, with fresh statistics (as autovacuum would soon have: without
// it, the vacuum a large fill sets off ran during the measured claims, and
// the first claims set every fresh row's hint bits), and a checkpoint, so
// the measured phase does not pay for the fill's dirty pages. A role that
// may not CHECKPOINT skips it.
func (r *runner) settle(ctx context.Context, tables ...string) error {
	for _, t := range tables {
		if _, err := r.admin.Exec(ctx, "VACUUM (ANALYZE) "+t); err != nil {
			return fmt.Errorf("analyze %s: %w", t, err)
		}
	}
	if r.noCheckpoint {
		return nil
	}
	if _, err := r.admin.Exec(ctx, "CHECKPOINT"); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.noCheckpoint = true
		r.logf("no CHECKPOINT before measuring (%v); figures may include the fills' writes", err)
	}
	return nil
}

// waitFor polls cond every interval until it holds or ctx is done.
func waitFor(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
