package drainer

import (
	"context"
	"sync"
	"time"

	"github.com/drainer-io/drainer/internal/maintenance"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
)

// deferrer pushes back, in bulk, the due rows of a tool that cannot be
// dispatched for a while (no route, paused, breaker open, credentials
// refused), so the claimer does not lease and give them back one by one:
// that would churn through a large backlog, write two audit entries per
// look, and delay other tools' rows queued behind them. It also makes rows
// due again when their tool can go out (a resume, a newly loaded route).
//
// One goroutine of the engine does this work, never a worker: a worker hands
// its row back at once and its lease is never held by a deferral. From the
// moment a refusal is reported until the deferral is written, the tool is
// excluded from claims, so at most one claim batch of its rows is ever
// looked at per deferral period. Deferrals and wakes are applied in the
// order they were requested, so a wake is never undone by an older deferral.
//
// The rows whose tool has no route are one class, deferred together
// (refuseUnrouted): producers name tools freely, and a tool at a time, with
// a row or two each, would take a statement per name and leave every row
// to be claimed and given back by itself at each recheck.
//
// Neither changes a row's status, so neither writes an audit entry, and
// neither can move a row before its not_before floor (a trigger of the
// schema holds it).
type deferrer struct {
	e *Engine

	mu       sync.Mutex
	queue    []deferral
	excluded map[string]int       // tool -> deferrals queued or running
	last     map[string]time.Time // tool -> last bulk deferral
	// unroutedLast is the last deferral of the rows without a route;
	// unroutedBusy counts those queued or running, routed is what the
	// claims take meanwhile (the routed tools; nil: every tool).
	unroutedLast time.Time
	unroutedBusy int
	routed       []string
	kick         chan struct{}
}

// deferral is one request: push tool's rows (with unrouted, the rows of
// every tool but routed) to about now()+delay, or (wake) make the rows of
// tools due now.
type deferral struct {
	tool     string
	reason   outbox.Refusal
	delay    time.Duration
	wake     []string
	unrouted bool
	routed   []string
}

// minDeferral: shorter refusals (saturation, rate limits) pass on their own.
const minDeferral = time.Second

func newDeferrer(e *Engine) *deferrer {
	return &deferrer{e: e, excluded: map[string]int{}, last: map[string]time.Time{}, kick: make(chan struct{}, 1)}
}

// refuse reports that rows of tool cannot go out for about delay. It never
// blocks and never touches the database.
func (d *deferrer) refuse(tool string, reason outbox.Refusal, delay time.Duration) {
	if delay < minDeferral {
		return
	}
	d.mu.Lock()
	if time.Since(d.last[tool]) < delay/2 {
		d.mu.Unlock()
		return // deferred recently: the rows claimed since are few
	}
	if len(d.last) >= maxToolsRemembered {
		clear(d.last) // forgetting only lets the next refusals defer again at once
	}
	d.last[tool] = time.Now()
	d.excluded[tool]++
	d.queue = append(d.queue, deferral{tool: tool, reason: reason, delay: delay})
	d.mu.Unlock()
	d.signal()
}

// refuseUnrouted reports that a claimed row's tool has no route: the rows
// of every tool not in routed are deferred for delay, together, and the
// claims take only routed's rows until that is done. It never blocks and
// never touches the database.
func (d *deferrer) refuseUnrouted(routed []string, delay time.Duration) {
	if delay < minDeferral {
		return
	}
	if routed == nil {
		routed = []string{}
	}
	d.mu.Lock()
	if time.Since(d.unroutedLast) < delay/2 {
		d.mu.Unlock()
		return // deferred recently: the rows claimed since are few
	}
	d.unroutedLast = time.Now()
	d.unroutedBusy++
	d.routed = routed
	d.queue = append(d.queue, deferral{reason: outbox.RefusedUnrouted, delay: delay, unrouted: true, routed: routed})
	d.mu.Unlock()
	d.signal()
}

// wake asks for the rows of tools to be made due now, and forgets past
// deferrals so the next refusal defers at once.
func (d *deferrer) wake(tools []string) {
	d.mu.Lock()
	d.last = map[string]time.Time{}
	d.unroutedLast = time.Time{}
	if len(tools) > 0 {
		d.e.holds.forget(tools)
		d.queue = append(d.queue, deferral{wake: tools})
	}
	d.mu.Unlock()
	d.signal()
}

// forget lets the next refusal of any tool defer its rows again at once.
func (d *deferrer) forget() { d.wake(nil) }

// excludedTools lists the tools the claim must skip right now.
func (d *deferrer) excludedTools() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.excluded) == 0 {
		return nil
	}
	tools := make([]string, 0, len(d.excluded))
	for t := range d.excluded {
		tools = append(tools, t)
	}
	return tools
}

// onlyTools lists the only tools the claim may take right now (the routed
// ones, while the rows without a route are being deferred), nil for all.
func (d *deferrer) onlyTools() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.unroutedBusy == 0 {
		return nil
	}
	return d.routed
}

func (d *deferrer) signal() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// service applies requests in order until stopped.
func (d *deferrer) service() *maintenance.Loop {
	return &maintenance.Loop{Name: "deferrer", Run: d.run}
}

func (d *deferrer) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
		}
		for {
			d.mu.Lock()
			if len(d.queue) == 0 {
				d.mu.Unlock()
				break
			}
			req := d.queue[0]
			d.queue = d.queue[1:]
			d.mu.Unlock()
			d.apply(ctx, req)
		}
	}
}

func (d *deferrer) apply(ctx context.Context, req deferral) {
	e := d.e
	life := ctx // the deferrer's: it ends when the engine stops
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if req.wake != nil {
		sent := time.Now()
		if err := e.st.Wake(ctx, e.pool, req.wake); err != nil && !isShutdown(ctx, err) && e.db.failed("deferrer", sent, err) {
			e.log.Warn("could not wake rows; they drain at their next look", "tools", req.wake, "err", err)
		}
		e.signalFull()
		return
	}
	defer d.done(req)
	if req.reason == outbox.RefusedPaused && !e.stillPaused(req.tool) {
		// The claim saw the pause just before a resume was read; the
		// resume's wake ran before this request: deferring now would undo it.
		return
	}
	deferBatch := func() (int64, error) { return e.st.Defer(ctx, e.pool, req.tool, req.delay) }
	if req.unrouted {
		deferBatch = func() (int64, error) { return e.st.DeferUnrouted(ctx, e.pool, req.routed, req.delay) }
	}
	var total int64
	for ctx.Err() == nil {
		sent := time.Now()
		n, err := deferBatch()
		if err != nil {
			if !isShutdown(ctx, err) && e.db.failed("deferrer", sent, err) {
				e.log.Warn("deferring rows failed; they are looked at one by one", "tool", req.tool, "reason", req.reason, "err", err)
			}
			return
		}
		total += n
		if n < store.DeferBatch {
			break
		}
	}
	if total > 0 {
		e.log.Debug("rows deferred", "tool", req.tool, "reason", req.reason, "rows", total, "for", req.delay)
		d.wakeAllWhenDue(life, req.delay)
	}
}

// done ends a deferral request: its tool (or, for the rows without a route,
// every tool) is claimed again.
func (d *deferrer) done(req deferral) {
	d.mu.Lock()
	if req.unrouted {
		if d.unroutedBusy--; d.unroutedBusy <= 0 {
			d.unroutedBusy, d.routed = 0, nil
		}
	} else if d.excluded[req.tool]--; d.excluded[req.tool] <= 0 {
		delete(d.excluded, req.tool)
	}
	d.mu.Unlock()
	d.e.signalFull()
}

// wakeAllWhenDue wakes every listening replica when rows deferred for a
// short delay come due (store.Defer: not jittered under
// store.DeferJitterFrom). The replica whose gate turned them away has a
// timer for the row it refused only, and another replica, whose gate is
// open (breakers and auth holds are each replica's own), would otherwise
// find them by its poll. Longer deferrals (pauses, a breaker's long
// waits) end with a resume or a probe's answer, which wake them.
func (d *deferrer) wakeAllWhenDue(life context.Context, delay time.Duration) {
	if delay >= store.DeferJitterFrom {
		return
	}
	time.AfterFunc(delay+deferWakeMargin, func() { d.e.wakeAll(life, "deferred rows came due") })
}

// wakeAll notifies every listening replica (this one too) that rows came
// due, within 5 s; one that is not told finds them at its next poll.
func (e *Engine) wakeAll(life context.Context, what string) {
	if life.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(life, 5*time.Second)
	defer cancel()
	sent := time.Now()
	if err := e.st.WakeAll(ctx, e.pool); err != nil && !isShutdown(ctx, err) && e.db.failed("wake-up", sent, err) {
		e.log.Warn("could not wake the replicas; they drain at their next poll", "for", what, "err", err)
	}
}

// deferWakeMargin: the deferral's rows come due at the database's now()
// of its statement plus the delay, at most the statement's time before
// this process's clock says it ended; the wake comes a little later, soon
// enough that a poll that claimed one of them meanwhile is still counted
// as woken (pollWitnessWait).
const deferWakeMargin = 10 * time.Millisecond
