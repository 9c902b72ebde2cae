package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/drainer-io/drainer/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schemaMark is the comment bench puts on the schemas it creates. A schema
// with this comment is bench's to drop; any other schema of the same name is
// left alone and the run refused.
const schemaMark = "drainer bench scratch schema: dropped by drainer bench"

// applicationName shows bench's connections in pg_stat_activity.
const applicationName = "drainer-bench"

// setup connects, creates and migrates the schemas and opens the replica pools.
func (r *runner) setup(ctx context.Context, url string) error {
	r.url, r.external = url, r.opts.DatabaseURL != ""
	r.schema, r.riverSchema = r.opts.Schema, r.opts.Schema+RiverSchemaSuffix
	// The engine's default claim batch (drainer.Config.WithDefaults).
	r.batchSize = min(r.opts.Workers, 64)

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
	    FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname IN ('outbox_audit_insert', 'outbox_audit_update')`,
		r.schema+".outbox").Scan(&r.audit)
	if err != nil {
		return fmt.Errorf("read audit triggers: %w", err)
	}
	// `drainer run` sizes its pool min(workers/4+8, 64) (internal/daemon).
	for range r.opts.Replicas {
		p, err := newPool(ctx, url, int32(min(r.opts.Workers/4+8, 64)))
		if err != nil {
			return err
		}
		r.pools = append(r.pools, p)
	}
	return nil
}

// newPool opens and pings a pool of at most maxConns connections.
func newPool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	pc.MaxConns = maxConns
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	pc.ConnConfig.RuntimeParams["application_name"] = applicationName
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

// reset empties the outbox and everything its rows left behind, so each
// phase starts from the same state.
func (r *runner) reset(ctx context.Context) error {
	s := r.schema
	_, err := r.admin.Exec(ctx, fmt.Sprintf("TRUNCATE %[1]s.outbox, %[1]s.audit, %[1]s.audit_anchors, %[1]s.tombstones, %[1]s.runs", s))
	if err != nil {
		return fmt.Errorf("reset %s: %w", s, err)
	}
	return nil
}

// settle makes a filled table's state independent of how it was filled:
// fresh statistics (as autovacuum would soon have) and a checkpoint, so the
// measured phase does not pay for the fill's dirty pages. A role that may
// not CHECKPOINT skips it.
func (r *runner) settle(ctx context.Context, tables ...string) error {
	for _, t := range tables {
		if _, err := r.admin.Exec(ctx, "ANALYZE "+t); err != nil {
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
