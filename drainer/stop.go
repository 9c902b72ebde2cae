package drainer

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/drainer-io/drainer/store"
)

// Stop stops claiming, waits for attempts under way until ctx is done, then
// cancels them; rows not yet sent go back to pending with their attempt
// given back, cut-off calls are recorded as such. It returns once every
// completion is written, or an error naming how many could not be.
func (e *Engine) Stop(ctx context.Context) error {
	if !e.started.Load() || !e.stopped.CompareAndSwap(false, true) {
		return nil
	}
	if d, ok := ctx.Deadline(); ok {
		by := d.Add(stopWriteMargin)
		e.stopBy.Store(by.UnixNano())
		stopWrites := time.AfterFunc(time.Until(by), e.stopWrites) // a write under way is cut off too
		defer stopWrites.Stop()
	}
	defer e.stopWrites()
	e.log.Info("engine stopping: no new claims", "calls_in_flight", e.active.Load())
	e.fetchCancel()
	// The claimer may be finishing a claim: its rows get workers (which
	// release them unsent) before the workers are waited for.
	<-e.claimDone
	e.retries.stop()
	e.takeMu.Lock()   // a Lease under way has started its worker, or gave up
	e.takeMu.Unlock() //nolint:staticcheck // a barrier, not a critical section
	waited := make(chan struct{})
	go func() { e.workers.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-ctx.Done():
		e.log.Warn("shutdown grace over: cancelling calls under way", "calls_in_flight", e.active.Load())
		e.workCancel()
		<-waited
	}
	e.workCancel()
	e.completer.close()
	e.loops.Wait()
	writeCtx, cancelWrite := e.stopDeadline()
	defer cancelWrite()
	if err := e.maint.Stop(writeCtx); err != nil {
		e.log.Warn("stopping maintenance", "err", err)
	}
	e.witness.settleAll(&e.claims) // the listener has stopped
	if !e.cfg.SharedAdapters {
		if err := e.routing.Load().Registry.Close(writeCtx); err != nil {
			e.log.Warn("closing adapters", "err", err)
		}
	} else if rt := e.routing.Load(); rt.Release != nil {
		rt.Release() // every worker and the claimer have exited
	}
	if n := e.completer.stillLeased(writeCtx); n > 0 {
		return fmt.Errorf("%d completions could not be written: their rows stay in_flight until the lease expires and are then retried with the same key", n)
	}
	e.log.Info("engine stopped")
	return nil
}

// Unwritten returns, once Stop has returned, the completions this engine
// answered and could not write, for the next engine on the same database
// (Config.Inherited). Written late over a reclaimed row, each still
// settles it unless the row was claimed again since (the lease fence).
func (e *Engine) Unwritten() []store.Completion {
	if !e.stopped.Load() {
		return nil
	}
	e.completer.unwrittenMu.Lock()
	defer e.completer.unwrittenMu.Unlock()
	return slices.Clone(e.completer.unwritten)
}

// stopWriteMargin is how long past its context's deadline Stop goes on
// writing completions and closing what the engine holds: a database that
// does not answer at shutdown must not keep the process past the grace its
// orchestrator gives (its completions are kept in Unwritten, and their rows
// are reclaimed when their lease expires).
const stopWriteMargin = 5 * time.Second

// stopDeadline is the context of Stop's last steps: until its deadline and
// stopWriteMargin, whatever cancelled Stop's own context, and at least
// minStopStep from now, so that services told to stop have a moment to.
func (e *Engine) stopDeadline() (context.Context, context.CancelFunc) {
	if n := e.stopBy.Load(); n != 0 {
		by := time.Unix(0, n)
		if time.Until(by) < minStopStep {
			by = time.Now().Add(minStopStep)
		}
		return context.WithDeadline(context.Background(), by)
	}
	return context.WithCancel(context.Background())
}

// minStopStep: see stopDeadline.
const minStopStep = 2 * time.Second
