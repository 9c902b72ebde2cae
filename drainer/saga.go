package drainer

import (
	"context"
	"sync"
	"time"

	"github.com/drainer-io/drainer/compensations"
	"github.com/drainer-io/drainer/outbox"
)

// sagaRunner moves sagas forward. It is driven by the events that move
// them, at once: a written completion of a row of an aborted run (a forward
// row failing or finishing, a compensation row ending), and an abort
// announced on the <schema>.saga channel. A sweep over the active sagas
// (waiting or compensating, never halted ones: only `drainer resolve` moves
// those) catches anything an event missed, a bounded batch at a time with a
// cursor, so every active saga gets its turn however many are open. Each
// saga advances in a transaction of its own: one that fails does not hold
// back or roll back another.
type sagaRunner struct {
	e *Engine

	mu      sync.Mutex
	pending map[string]bool
	kick    chan struct{}
}

// Saga runner tuning.
const (
	// sagaSweepBatch bounds the sagas one sweep statement advances.
	sagaSweepBatch = 200
	// sagaBusyRetry is when a run another replica was advancing is tried again.
	sagaBusyRetry = 200 * time.Millisecond
	// alertFullPass is how often every compensation_failed row is checked
	// for its alert (events queue them at once).
	alertFullPass = 30 * time.Second
)

func newSagaRunner(e *Engine) *sagaRunner {
	return &sagaRunner{e: e, pending: map[string]bool{}, kick: make(chan struct{}, 1)}
}

// notify asks for the sagas of runs to be advanced now. It never blocks.
func (s *sagaRunner) notify(runs ...string) {
	if len(runs) == 0 {
		return
	}
	s.mu.Lock()
	for _, r := range runs {
		s.pending[r] = true
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *sagaRunner) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	runs := make([]string, 0, len(s.pending))
	for r := range s.pending {
		runs = append(runs, r)
	}
	clear(s.pending)
	return runs
}

func (s *sagaRunner) run() {
	e := s.e
	defer e.loops.Done()
	sweep := time.NewTicker(e.cfg.SagaInterval)
	defer sweep.Stop()
	var cursor string
	var lastFullAlert time.Time
	for {
		select {
		case <-e.fetchCtx.Done():
			return
		case <-s.kick:
			s.advance(s.take())
		case <-sweep.C:
			cursor = s.sweep(cursor)
			if rt := e.routing.Load(); rt.CompensationFailedAlert != "" && time.Since(lastFullAlert) > alertFullPass {
				lastFullAlert = time.Now()
				s.queueAlerts(nil)
			}
		}
	}
}

// advance moves the sagas of runs forward, each in its own transaction.
func (s *sagaRunner) advance(runs []string) {
	e := s.e
	if len(runs) == 0 {
		return
	}
	m := e.routing.Load().Compensations
	var busy, halted []string
	for _, run := range runs {
		ctx, cancel := context.WithTimeout(e.fetchCtx, 30*time.Second)
		state, err := compensations.Advance(ctx, e.pool, e.cfg.Schema, run, m)
		cancel()
		switch {
		case err != nil:
			if isShutdown(e.fetchCtx, err) {
				return
			}
			e.log.Warn("saga step failed; the sweep tries again", "agent_run_id", run, "err", err)
		case state == "busy":
			busy = append(busy, run)
		case state == outbox.SagaHalted:
			halted = append(halted, run)
		}
	}
	if len(halted) > 0 && e.routing.Load().CompensationFailedAlert != "" {
		s.queueAlerts(halted)
	}
	if len(busy) > 0 {
		// Another replica holds the run: its step may have begun before the
		// event was committed, so look again shortly.
		time.AfterFunc(sagaBusyRetry, func() { s.notify(busy...) })
	}
}

// sweep advances the next batch of active sagas after cursor and returns
// the cursor to continue from.
func (s *sagaRunner) sweep(cursor string) string {
	e := s.e
	rt := e.routing.Load()
	ctx, cancel := context.WithTimeout(e.fetchCtx, 30*time.Second)
	defer cancel()
	res, err := compensations.Sweep(ctx, e.pool, e.cfg.Schema, rt.Compensations, cursor, sagaSweepBatch)
	if err != nil {
		if !isShutdown(e.fetchCtx, err) {
			e.log.Warn("saga sweep failed", "err", err)
		}
		return cursor
	}
	for run, msg := range res.Failed {
		e.log.Error("saga step failed; noted on the run, other sagas go on", "agent_run_id", run, "err", msg)
	}
	if len(res.Halted) > 0 && rt.CompensationFailedAlert != "" {
		s.queueAlerts(res.Halted)
	}
	if len(res.Busy) > 0 {
		s.notify(res.Busy...)
	}
	return res.Last
}

// queueAlerts queues the alert of each compensation_failed row of runs (nil:
// of every run) that has none yet.
func (s *sagaRunner) queueAlerts(runs []string) {
	e := s.e
	ctx, cancel := context.WithTimeout(e.fetchCtx, 30*time.Second)
	defer cancel()
	n, err := compensations.QueueAlerts(ctx, e.pool, e.cfg.Schema, runs)
	switch {
	case err != nil && !isShutdown(e.fetchCtx, err):
		e.log.Warn("queueing compensation_failed alerts failed", "err", err)
	case n > 0:
		e.log.Error("compensation failed: a human must act; alert queued", "alerts", n,
			"adapter", e.routing.Load().CompensationFailedAlert)
		e.signal()
	}
}
