package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/migrations"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// drain is the life of one entry: start the database's engine (retrying
// with backoff while the database is unreachable or its schema is not this
// release's, each failure logged with its name and counted), run it until
// the database is let go, then stop it and forget the entry.
func (f *Fleet) drain(ctx context.Context, e *entry) {
	defer f.wg.Done()
	defer close(e.done)
	log := f.log.With("database", e.db.Name)
	var d *running
	delay := 500 * time.Millisecond
	for ctx.Err() == nil {
		var err error
		if d, err = f.open(ctx, e.db); err == nil {
			break
		}
		if ctx.Err() != nil {
			break
		}
		reason := reasonUnreachable
		if errors.Is(err, migrations.ErrSchemaNotReady) {
			reason = reasonSchemaMismatch
		}
		f.m.dbErrors.WithLabelValues(e.db.Name, reason).Inc()
		f.setState(e, reason)
		log.Error("cannot drain database; retrying", "reason", reason, "err", redact(err), "retry_in", delay)
		if !sleep(ctx, delay) {
			break
		}
		delay = min(2*delay, 30*time.Second)
	}
	if d != nil {
		e.eng.Store(d.eng)
		f.setState(e, "running")
		f.m.handoversTotal.WithLabelValues("acquired").Inc()
		log.Info("draining database")
		<-ctx.Done()
		f.detach(d.eng)
		sctx, cancel := context.WithTimeout(context.Background(), f.cfg.StopTimeout)
		if err := d.close(sctx); err != nil {
			f.m.dbErrors.WithLabelValues(e.db.Name, reasonStop).Inc()
			log.Warn("stopping database's engine", "err", redact(err))
		}
		cancel()
		f.m.handoversTotal.WithLabelValues("released").Inc()
		log.Info("database let go")
	}
	f.mu.Lock()
	if f.entries[e.db.Name] == e {
		delete(f.entries, e.db.Name)
	}
	f.countStatesLocked()
	f.mu.Unlock()
	f.signal() // it may be owned again (a new URL, a member that came back)
}

// startTimeout bounds one attempt to start a database's engine (connect,
// check the schema, start): generous, since a replica starting hundreds of
// engines at once on a busy host is slow, and an attempt cut short only
// starts again later.
const startTimeout = 30 * time.Second

// running is one database's engine with what it holds.
type running struct {
	pool *pgxpool.Pool
	eng  *drainer.Engine
	reg  *trackingRegisterer
}

// open connects to db, checks its schema and starts its engine, with
// metrics labelled with the database's name.
func (f *Fleet) open(ctx context.Context, db Database) (r *running, err error) {
	pc, err := poolConfig(db.URL, f.cfg.PoolConns)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, errors.New(redact(err))
	}
	reg := &trackingRegisterer{
		Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"database": db.Name}, f.cfg.Registerer)}
	r = &running{pool: pool, reg: reg}
	defer func() {
		if err != nil {
			pool.Close()
			reg.unregisterAll()
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if _, err := migrations.Check(cctx, pool, f.cfg.Schema); err != nil {
		return nil, err
	}
	m, err := newEngineMetrics(r.reg)
	if err != nil {
		return nil, err
	}
	cfg := f.cfg.Engine
	cfg.Schema, cfg.ReplicaID, cfg.Metrics = f.cfg.Schema, f.cfg.MemberID, m
	cfg.Logger = f.log.With("database", db.Name)
	cfg.PollOnly, cfg.SharedAdapters = true, true
	// An idle database's periodic work is what bounds a fleet's size: its
	// generations are rotated every 30 s rather than every 5.
	cfg.RotateInterval = cmp.Or(cfg.RotateInterval, 30*time.Second)
	f.gmu.Lock()
	if f.gen == nil {
		f.gmu.Unlock()
		return nil, errors.New("fleet stopped")
	}
	rt, g := f.newRoutingLocked()
	f.gmu.Unlock()
	if r.eng, err = drainer.New(pool, rt, cfg); err != nil {
		rt.Release()
		return nil, err
	}
	if err := r.eng.Start(cctx); err != nil {
		rt.Release() // nothing claimed: the engine never ran
		return nil, err
	}
	f.attach(r.eng, g)
	return r, nil
}

// newEngineMetrics registers an engine's metrics, turning a registration
// panic (a collector still registered) into an error.
func newEngineMetrics(reg prometheus.Registerer) (m *drainer.Metrics, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("engine metrics: %v", p)
		}
	}()
	return drainer.NewDatabaseMetrics(reg), nil
}

// close stops the engine, closes the pool and unregisters the metrics.
func (r *running) close(ctx context.Context) error {
	err := r.eng.Stop(ctx)
	r.pool.Close()
	r.reg.unregisterAll()
	return err
}
