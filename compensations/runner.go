package compensations

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Runner moves sagas forward. It is driven by the events that move them,
// at once: a written completion of a row of an aborted run (a forward row
// failing or finishing, a compensation row ending), and an abort announced
// on the <schema>.saga channel (Notify). A sweep over the active sagas
// (waiting or compensating, never halted ones: only `drainer resolve` moves
// those) catches anything an event missed, a bounded batch at a time with a
// cursor, so every active saga gets its turn however many are open. Each
// saga advances in a transaction of its own: one that fails does not hold
// back or roll back another.
//
// Runner is a service: Start it once, Stop it once (Stop before Start, or
// twice, is harmless).
type Runner struct {
	cfg RunnerConfig

	mu      sync.Mutex
	pending map[string]bool
	kick    chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	Pool  *pgxpool.Pool
	Store *store.Store
	// Routing returns the compensation map in force and whether an alert
	// adapter is configured (a reload may change both).
	Routing func() (Map, bool)
	// SweepInterval is how often the sweep runs (default 1s).
	SweepInterval time.Duration
	// Queued is called after alert rows were queued (wake the claimer).
	Queued func()
	Logger *slog.Logger
	// DBFailed, when set, is told of each failed statement and when it was
	// sent, and reports whether the runner should log it (the engine logs
	// a database outage once, not once per statement).
	DBFailed func(subsystem string, sent time.Time, err error) bool
}

// dbFailed reports whether a statement sent at sent that failed is the
// runner's to log.
func (r *Runner) dbFailed(sent time.Time, err error) bool {
	return r.cfg.DBFailed == nil || r.cfg.DBFailed("saga runner", sent, err)
}

// Runner tuning.
const (
	// SweepBatch bounds the sagas one sweep statement advances.
	SweepBatch = 200
	// busyRetry is when a run another replica was advancing is tried again.
	busyRetry = 200 * time.Millisecond
	// alertFullPass is how often every compensation_failed row is checked
	// for its alert (events queue them at once).
	alertFullPass = 30 * time.Second
)

// NewRunner returns a runner; it does nothing until Start.
func NewRunner(cfg RunnerConfig) *Runner {
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Queued == nil {
		cfg.Queued = func() {}
	}
	return &Runner{cfg: cfg, pending: map[string]bool{}, kick: make(chan struct{}, 1)}
}

// Start runs the runner until Stop.
func (r *Runner) Start(context.Context) error {
	if r.done != nil {
		return errors.New("saga runner already started")
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go r.run(ctx)
	return nil
}

// Stop ends the runner and waits for it.
func (r *Runner) Stop(context.Context) error {
	if r.done == nil {
		return nil
	}
	r.cancel()
	<-r.done
	return nil
}

// Notify asks for the sagas of runs to be advanced now. It never blocks.
func (r *Runner) Notify(runs ...string) {
	if len(runs) == 0 {
		return
	}
	r.mu.Lock()
	for _, run := range runs {
		r.pending[run] = true
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *Runner) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	runs := make([]string, 0, len(r.pending))
	for run := range r.pending {
		runs = append(runs, run)
	}
	clear(r.pending)
	return runs
}

func (r *Runner) run(ctx context.Context) {
	defer close(r.done)
	sweep := time.NewTicker(r.cfg.SweepInterval)
	defer sweep.Stop()
	var cursor string
	var lastFullAlert time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
			r.advance(ctx, r.take())
		case <-sweep.C:
			cursor = r.sweep(ctx, cursor)
			if _, alerts := r.cfg.Routing(); alerts && time.Since(lastFullAlert) > alertFullPass {
				lastFullAlert = time.Now()
				r.queueAlerts(ctx, nil)
			}
		}
	}
}

// advance moves the sagas of runs forward, each in its own transaction.
func (r *Runner) advance(ctx context.Context, runs []string) {
	if len(runs) == 0 {
		return
	}
	m, alerts := r.cfg.Routing()
	var busy, halted []string
	for _, run := range runs {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		sent := time.Now()
		state, err := r.cfg.Store.AdvanceSaga(sctx, r.cfg.Pool, run, m)
		cancel()
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			if r.dbFailed(sent, err) {
				r.cfg.Logger.Warn("saga step failed; the sweep tries again", "agent_run_id", run, "err", err)
			}
		case state == "busy":
			busy = append(busy, run)
		case state == outbox.SagaHalted:
			halted = append(halted, run)
		}
	}
	if len(halted) > 0 && alerts {
		r.queueAlerts(ctx, halted)
	}
	if len(busy) > 0 {
		// Another replica holds the run: its step may have begun before the
		// event was committed, so look again shortly.
		time.AfterFunc(busyRetry, func() { r.Notify(busy...) })
	}
}

// sweep advances the next batch of active sagas after cursor and returns
// the cursor to continue from ("" once the end was reached).
func (r *Runner) sweep(ctx context.Context, cursor string) string {
	m, alerts := r.cfg.Routing()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sent := time.Now()
	steps, err := r.cfg.Store.SweepSagas(sctx, r.cfg.Pool, cursor, SweepBatch, m)
	if err != nil {
		if ctx.Err() == nil && r.dbFailed(sent, err) {
			r.cfg.Logger.Warn("saga sweep failed", "err", err)
		}
		return cursor
	}
	var busy, halted []string
	for _, st := range steps {
		switch st.State {
		case "busy":
			busy = append(busy, st.Run)
		case outbox.SagaHalted:
			halted = append(halted, st.Run)
		case "error":
			r.cfg.Logger.Error("saga step failed; noted on the run, other sagas go on", "agent_run_id", st.Run, "err", st.Err)
		}
	}
	if len(halted) > 0 && alerts {
		r.queueAlerts(ctx, halted)
	}
	r.Notify(busy...)
	if len(steps) < SweepBatch {
		return ""
	}
	return steps[len(steps)-1].Run
}

// queueAlerts queues the alert of each compensation_failed row of runs (nil:
// of every run) that has none yet.
func (r *Runner) queueAlerts(ctx context.Context, runs []string) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sent := time.Now()
	alerted, err := r.cfg.Store.QueueAlerts(sctx, r.cfg.Pool, runs)
	switch {
	case err != nil && ctx.Err() == nil:
		if r.dbFailed(sent, err) {
			r.cfg.Logger.Warn("queueing compensation_failed alerts failed", "err", err)
		}
	case len(alerted) > 0:
		for _, a := range alerted {
			r.cfg.Logger.Error("compensation failed: a human must act (drainer resolve); alert queued",
				"key", a.Key, "agent_run_id", a.Run, "tool_name", a.Tool)
		}
		r.cfg.Queued()
	}
}
