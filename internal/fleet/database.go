package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// drain is the life of one entry: start the database's engine (retrying
// with backoff while the database is unreachable, its schema is not this
// release's or its start timed out, each failure logged with its name and
// counted), run it until the database is let go, then stop it and forget
// the entry.
//
// Each attempt first counts its pool in the replica's budget (the pool
// opens only while the replica holds fewer than its share), then takes one
// of the few start slots: a replica given many databases at once starts
// them a few at a time, each attempt's bound counted from its slot, rather
// than all at once on a host they would all slow down (every start timing
// out, every engine's statements late, heartbeats late and members
// expiring for nothing).
func (f *Fleet) drain(ctx context.Context, e *entry) {
	defer f.wg.Done()
	defer close(e.done)
	log := f.log.With("database", e.db.Name)
	var d *running
	delay := 500 * time.Millisecond
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if !f.budget.acquire(ctx) {
			break
		}
		var err error
		if release, ok := f.startSlot(ctx, attempt > 0); ok {
			d, err = f.open(ctx, e.db)
			release()
		} else {
			err = ctx.Err()
		}
		if err == nil {
			break
		}
		f.budget.release() // no pool, or open closed it
		if ctx.Err() != nil {
			break
		}
		reason := startFailure(err)
		f.m.dbErrors.WithLabelValues(e.db.Name, reason).Inc()
		state := reason
		if reason == reasonStartTimeout {
			// Reached, but slow to answer: not unreachable.
			state = stateStarting
		}
		f.setState(e, state)
		logStartFailure(log, e.db.Name, reason, err, delay)
		if !sleep(ctx, delay) {
			break
		}
		delay = min(2*delay, 30*time.Second)
	}
	if d != nil {
		e.eng.Store(d.eng)
		f.setState(e, stateRunning)
		f.m.handoversTotal.WithLabelValues("acquired").Inc()
		log.Info("draining database")
		f.watchHealth(ctx, e, d.eng, log)
		f.detach(d.eng)
		sctx, cancel := context.WithTimeout(context.Background(), f.stopGrace())
		if err := d.close(sctx); err != nil {
			f.m.dbErrors.WithLabelValues(e.db.Name, reasonStop).Inc()
			log.Warn("stopping database's engine", "err", redact(err))
		}
		cancel()
		f.budget.release()
		f.m.handoversTotal.WithLabelValues("released").Inc()
		log.Info("database let go")
	}
	var unwritten []store.Completion
	if d != nil {
		unwritten = d.eng.Unwritten()
	}
	f.mu.Lock()
	if f.entries[e.db.Name] == e {
		delete(f.entries, e.db.Name)
		f.states[e.state.Load().(string)]--
	}
	if len(unwritten) > 0 {
		f.unwritten[e.db.Name] = append(f.unwritten[e.db.Name], unwritten...)
	}
	// Its pool is closed: the next publication says so, and the replica
	// it is assigned to now opens its own.
	f.released[e.db.Name] = true
	f.countStatesLocked()
	f.mu.Unlock()
	f.signal() // it may be owned again (a new URL, a member that came back)
}

// stopGrace is how long a database's engine is given to stop once let go:
// StopTimeout when the replica shuts down; when the database moves to
// another replica, long enough for every call under way to finish (each
// is bounded by its row's lease), so that none is cut off and its row sent
// again: the new owner waits for the release, nothing is in a hurry.
func (f *Fleet) stopGrace() time.Duration {
	f.mu.Lock()
	closing := f.closing
	f.mu.Unlock()
	if closing {
		return f.cfg.StopTimeout
	}
	return max(f.cfg.StopTimeout, f.cfg.Engine.WithDefaults().Lease)
}

// startConcurrency is how many engines a replica starts at once.
const startConcurrency = 4

// startSlot waits for one of the start slots (and, for a retry, first for
// one of half as many retry slots), and returns its release; false when
// ctx ended first. Databases that keep failing to start (one that takes
// connections and never answers holds its slot for a whole start_timeout)
// so never hold every slot: the others are left to databases started for
// the first time, which are drained within refresh however many fail.
func (f *Fleet) startSlot(ctx context.Context, retry bool) (release func(), ok bool) {
	if retry {
		select {
		case f.retries <- struct{}{}:
		case <-ctx.Done():
			return nil, false
		}
	}
	select {
	case f.starts <- struct{}{}:
	case <-ctx.Done():
		if retry {
			<-f.retries
		}
		return nil, false
	}
	return func() {
		<-f.starts
		if retry {
			<-f.retries
		}
	}, true
}

// startFailure classifies why an engine did not start: its schema is not
// this release's; the database could not be connected to (refused,
// unknown, authentication, or no connection within the bound); or,
// connected, its start did not finish within the bound (start_timeout: a
// loaded database or host, not an unreachable one).
func startFailure(err error) string {
	switch {
	case errors.Is(err, migrations.ErrSchemaNotReady):
		return reasonSchemaMismatch
	case errors.As(err, new(*pgconn.ConnectError)):
		return reasonUnreachable
	case errors.Is(err, context.DeadlineExceeded):
		return reasonStartTimeout
	}
	return reasonUnreachable
}

// logStartFailure logs why the engine of database name did not start. A
// schema that is not migrated is told with the fleet's command for it: the
// schema's own advice names no database.
func logStartFailure(log *slog.Logger, name, reason string, err error, delay time.Duration) {
	args := []any{"reason", reason, "err", redact(err), "retry_in", delay}
	switch {
	case errors.Is(err, migrations.ErrDaemonTooOld):
		// A schema newer than this release: migrate cannot help.
		args = append(args, "fix", "upgrade drainer to a release that knows this schema")
	case reason == reasonSchemaMismatch:
		args = append(args, "fix", "drainer migrate --database "+name+" --config FILE (or drainer migrate --all --config FILE)")
	}
	log.Error("cannot drain database; retrying", args...)
}

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
	cctx, cancel := context.WithTimeout(ctx, f.cfg.StartTimeout)
	defer cancel()
	if _, err := migrations.Check(cctx, pool, f.cfg.Schema); err != nil {
		return nil, err
	}
	if f.cfg.Checked != nil {
		f.cfg.Checked(cctx, db.Name, pool)
	}
	m, err := newEngineMetrics(r.reg)
	if err != nil {
		return nil, err
	}
	cfg := f.cfg.Engine
	cfg.Schema, cfg.ReplicaID, cfg.Metrics = f.cfg.Schema, f.cfg.MemberID, m
	f.mu.Lock()
	cfg.Inherited = f.unwritten[db.Name]
	f.mu.Unlock()
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
	// A fleet's engines poll (they do not listen): their claims count
	// under poll, which is the truth of how a fleet finds its rows.
	if err := r.reg.Register(r.eng.ClaimCollector()); err != nil {
		rt.Release()
		return nil, fmt.Errorf("engine metrics: %w", err)
	}
	if err := r.eng.Start(cctx); err != nil {
		rt.Release() // nothing claimed: the engine never ran
		return nil, err
	}
	// Taken over: what the new engine could not write yet it keeps.
	f.mu.Lock()
	delete(f.unwritten, db.Name)
	f.mu.Unlock()
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

// poolCloseWait bounds the close of a database's pool, and of the
// coordination connection, when the fleet stops (store.ClosePool).
const poolCloseWait = 2 * time.Second

// close stops the engine, closes the pool (waiting for it at most
// poolCloseWait: a connection held by a statement the server does not
// answer is left behind) and unregisters the metrics.
func (r *running) close(ctx context.Context) error {
	err := r.eng.Stop(ctx)
	store.ClosePool(r.pool, poolCloseWait)
	r.reg.unregisterAll()
	return err
}

// watchHealth follows a draining database's health until ctx ends: once
// its engine finds it down (unreachable, or refusing writes), the
// database is counted unreachable in drainer_fleet_databases and in
// drainer_fleet_database_errors_total (again every healthCount while it
// stays down, as a start retried with backoff is), so that
// DrainerFleetDatabaseUndrainable pages on it as on one that cannot be
// started; once back, it is running again.
func (f *Fleet) watchHealth(ctx context.Context, e *entry, eng interface{ DatabaseDown() (bool, time.Time) }, log *slog.Logger) {
	tick := time.NewTicker(healthEvery)
	defer tick.Stop()
	var down bool
	var counted time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now, since := eng.DatabaseDown()
		switch {
		case now && (!down || time.Since(counted) >= healthCount):
			if !down {
				log.Warn("database unreachable while draining; its engine retries, and it counts as unreachable until it answers", "since", since)
				f.setState(e, stateUnreachable)
			}
			down, counted = true, time.Now()
			f.m.dbErrors.WithLabelValues(e.db.Name, reasonUnreachable).Inc()
		case !now && down:
			down = false
			f.setState(e, stateRunning)
			log.Info("database answers again; draining")
		}
	}
}

// healthEvery is how often a draining database's health is looked at;
// healthCount how often an outage is counted again while it lasts.
const (
	healthEvery = 2 * time.Second
	healthCount = 30 * time.Second
)
