package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// call answers one tools/call of t: its tuple, then straight through (a
// read-only naturally idempotent tool) or recorded, dispatched by the
// engine and answered once its row settled.
func (g *Gateway) call(ctx context.Context, t *Tool, req *sdk.CallToolRequest) (res *sdk.CallToolResult, err error) {
	start := time.Now()
	wait := g.waitFor()
	deadline := start.Add(wait)
	ctx, cancel := g.callContext(ctx, deadline)
	defer cancel()
	outcome := OutcomeRefused
	defer func() {
		g.metrics.calls.WithLabelValues(t.Name, string(outcome)).Inc()
		g.metrics.seconds.WithLabelValues(t.Name).Observe(time.Since(start).Seconds())
		g.log.Debug("gateway: call answered", "tool", t.Name, "outcome", string(outcome), "duration", time.Since(start))
	}()
	var header http.Header
	if req.Extra != nil {
		header = req.Extra.Header
	}
	tuple, payload, err := identify(t.Name, req.Params.Arguments, req.Params.Meta, header)
	if err != nil {
		g.log.Info("gateway: call refused", "tool", t.Name, "reason", err.Error())
		return nil, invalidParams(err.Error())
	}
	key := tuple.Key()
	tp, _, _ := metaString(req.Params.Meta, MetaTraceparent)
	if tp != "" && !wire.ValidTraceparent(tp) {
		tp = ""
	}
	if res, refused, err := g.unrouted(ctx, t, key); refused {
		return res, err
	}
	if t.Passthrough {
		res, sent := g.passthrough(ctx, t, key, tuple, payload, tp)
		if sent {
			outcome = OutcomePassthrough
		}
		return res, nil
	}

	// Interest first, then the record: an announcement between the two
	// is not lost.
	settled, stopWatching := g.watch.watch(key)
	defer stopWatching()
	in := store.Intent{AgentRunID: tuple.AgentRunID, StepID: tuple.StepID, ToolName: tuple.ToolName,
		BusinessScope: tuple.BusinessScope, Payload: payload}
	if tp != "" {
		in.Traceparent = &tp
	}
	enq, leased, refusal, err := g.record(ctx, t, tuple, in, deadline)
	if err != nil {
		if refusal {
			outcome = OutcomeConflict
		}
		return nil, err
	}
	// A row created and leased here is in flight: it settles later. One
	// created and not leased may be settled already (cancelled, its run
	// aborted), and is read at once. An agent that hangs up ends the
	// wait at once, freeing its slot: its row stays recorded and goes
	// on, and its retry joins it.
	c, whole, joined, err := g.await(ctx, key, leased, settled, hungUp(ctx), enq.Created, deadline)
	if errors.Is(err, errHungUp) {
		outcome = OutcomeTimeout
		g.log.Debug("gateway: the agent hung up; its call goes on", "tool", t.Name, "key", key)
		return timedOut(c, wait, !enq.Created), nil
	}
	if err == nil && c.Settled() {
		if c, err = g.budgeted(ctx, c, deadline); errors.Is(err, errAnswersBusy) {
			outcome = OutcomeTimeout
			return answersBusy(c, !enq.Created), nil
		}
	}
	res, outcome, err = g.respond(t, key, c, whole, enq.Created, joined, err)
	return res, err
}

// unrouted refuses a call of t (key) when a reload removed t's route
// (Config.Routed) and the call was not recorded before: its row would wait
// for a route. A call recorded before goes on, answered from its record as
// any repeat.
func (g *Gateway) unrouted(ctx context.Context, t *Tool, key string) (res *sdk.CallToolResult, refused bool, err error) {
	if g.cfg.Routed == nil {
		return nil, false, nil
	}
	why := g.cfg.Routed(t.Name)
	if why == nil {
		return nil, false, nil
	}
	_, rerr := g.read(ctx, key, 0)
	switch {
	case errors.Is(rerr, store.ErrNoCall):
		g.log.Info("gateway: a call not recorded", "tool", t.Name, "reason", why.Error())
		return errorResult(sdk.Meta{MetaKey: key}, fmt.Sprintf("%s was not recorded or sent: %v (the config was reloaded without it); call a tool the gateway lists", t.Name, why)), true, nil
	case rerr != nil:
		g.log.Warn("gateway: could not read whether a call of a tool without a route was recorded before", "tool", t.Name, "key", key, "err", rerr)
		return nil, true, &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
			Message: fmt.Sprintf("%s has no route now (%v), and whether this call (key %s) was recorded before could not be read: %v; nothing new was recorded or sent: call again with the same arguments", t.Name, why, key, rerr)}
	}
	g.log.Info("gateway: a call recorded before its tool's route was removed; answered from its record", "tool", t.Name, "key", key)
	return nil, false, nil
}

// errHungUp ends the wait of a call whose agent hung up.
var errHungUp = errors.New("the agent hung up")

// respond is the answer to a recorded call of key from its row c as await
// left it (whole its record decoded, when the announcement answered it;
// err its error), and the call's outcome: created says this call recorded
// the row, joined that it found the row in flight.
func (g *Gateway) respond(t *Tool, key string, c store.Call, whole *sdk.CallToolResult, created, joined bool, err error) (*sdk.CallToolResult, Outcome, error) {
	var outcome Outcome
	switch {
	case errors.Is(err, store.ErrNoCall):
		return pruned(key), OutcomeReplayed, nil
	case err != nil:
		// Recorded, perhaps sent: not a refusal (nothing recorded or
		// sent), but a call that did not get its outcome in time.
		g.log.Warn("gateway: could not read a call's row", "tool", t.Name, "key", key, "err", err)
		return nil, OutcomeTimeout, &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
			Message: fmt.Sprintf("drainer recorded the call (key %s) but could not read its outcome: %v; call again with the same arguments for it", key, err)}
	case !c.Settled():
		if g.isClosing() {
			return interrupted(c, !created), OutcomeTimeout, nil
		}
		return timedOut(c, g.waitFor(), !created), OutcomeTimeout, nil
	case created:
		outcome = OutcomeCreated
	case joined:
		outcome = OutcomeJoined
	default:
		outcome = OutcomeReplayed
	}
	res := answer(c, whole, !created, t.typed)
	if whole == nil && (created || joined) {
		// The call that waited for the row gets a result too large to
		// record whole, when this process sent it.
		res = g.whole(t, c, res)
	}
	return res, outcome, nil
}

// record enqueues the call's intent and commits it, before anything is
// sent: with Config.Lease, leased to the engine of this process in the same
// transaction (store.EnqueueLeasedBatch, with the calls arriving meanwhile:
// recorder), which dispatches it at once; otherwise,
// or when that engine takes no row now, announced as any producer's. A row
// recorded unannounced and not leased wakes every listening daemon. A
// refusal is a conflict: the tuple was recorded with other arguments
// (refusal true). Any other error is the answer to give. leased is the seq
// of the row when this call leased it to that engine, 0 otherwise.
func (g *Gateway) record(ctx context.Context, t *Tool, tuple idemkey.Tuple, in store.Intent, deadline time.Time) (enq store.Enqueued, leased int64, refusal bool, err error) {
	key := tuple.Key()
	callCtx := ctx
	// The record is not cut off by the agent hanging up (a row leased by a
	// commit whose answer was cut off would wait for its lease to expire),
	// only by the call's bounds.
	ctx, cancel := g.callContext(context.WithoutCancel(ctx), deadline)
	defer cancel()
	ran, retried := false, false
	if g.cfg.Lease != nil {
		ran, err = g.cfg.Lease(ctx, func(ctx context.Context, c store.Claim) (row *store.ClaimedRow, err error) {
			res := g.rec.record(ctx, store.LeaseRequest{In: in, Claim: c})
			if res.alone {
				// Its batch rolled back (another call's arguments
				// refused, a connection lost): recorded by itself. The
				// batch's commit may have been lost after it took effect.
				_, err = g.onLive(ctx, func(db store.DB) (err error) {
					enq, row, err = g.cfg.Store.EnqueueLeased(ctx, db, in, c)
					return err
				})
				retried = true
			} else {
				enq, row, retried, err = res.leased.Enqueued, res.leased.Row, res.retried, res.err
			}
			if row != nil {
				leased = row.Seq
			}
			return row, err
		})
	}
	if !ran {
		retried, err = g.onLive(ctx, func(db store.DB) (err error) {
			enq, err = g.cfg.Store.Enqueue(ctx, db, in)
			return err
		})
	}
	if err == nil {
		if ran && leased == 0 && (enq.Created || retried) {
			// Recorded unannounced (perhaps by a first try whose answer was
			// lost) and not leased here: held by its scope's order or its
			// tool's deferral, or claimed by another replica.
			g.wakeAll(callCtx, key)
		}
		return enq, leased, false, nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		g.log.Info("gateway: conflicting call refused", "tool", t.Name, "key", key, "agent_run_id", tuple.AgentRunID, "step_id", tuple.StepID)
		return enq, 0, true, invalidParams(fmt.Sprintf("key %s was recorded with other arguments for this agent_run_id, step_id, tool and business_scope; nothing was sent. "+
			"A deliberate second call in one run names its own _meta[%q]", key, MetaStepID))
	}
	if errors.As(err, &pgErr) && (pgErr.Code[:2] == "22" || pgErr.Code[:2] == "23" || pgErr.Code == "54000") {
		// Refused for what the call is (its arguments too large, 54000,
		// among them): the same call is refused again, so the answer is
		// not an invitation to retry it.
		return enq, 0, false, invalidParams(fmt.Sprintf("the call cannot be recorded: %s; nothing was sent, and the same call would be refused again", pgErr.Message))
	}
	g.log.Warn("gateway: could not record a call; nothing was sent", "tool", t.Name, "key", key, "err", err)
	return enq, 0, false, &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
		Message: fmt.Sprintf("drainer could not record the call (key %s): %v; nothing was sent: call again with the same arguments", key, err)}
}

// wakeAll wakes every listening daemon for the row of key, recorded
// unannounced and not leased, as the enqueue's notification would have,
// within wakeTimeout; the call waits for it no longer than ctx. Should it
// fail, the daemons' next poll finds the row.
func (g *Gateway) wakeAll(ctx context.Context, key string) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wakeTimeout)
		defer cancel()
		if _, err := g.onLive(wctx, func(db store.DB) error { return g.cfg.Store.WakeAll(wctx, db) }); err != nil {
			g.log.Warn("gateway: could not wake the daemons for a recorded call; it is found by their next poll", "key", key, "err", err)
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// whole replaces the answer about a result too large to record by the
// result itself, when the tool's adapter in this process still has it.
func (g *Gateway) whole(t *Tool, c store.Call, res *sdk.CallToolResult) *sdk.CallToolResult {
	if _, tooLarge := recordTooLarge(c.Record); !tooLarge || t.Oversized == nil {
		return res
	}
	full, ok := t.Oversized(c.Key)
	if !ok {
		return res
	}
	r, err := fromRecord(full)
	if err != nil {
		return res
	}
	r.Meta = res.Meta
	return r
}

// await reads the row of key until it settled, the wait ended (at
// deadline) or ctx ended, or until gone is closed (the agent hung up:
// errHungUp, at once); joined says it was not settled at first. A row
// this call just created is not read before its first announcement (or
// recheck), unless it was not leased by this call (leased, its seq, is 0):
// it may have been created settled then (cancelled: its run is aborted),
// which nothing announces. A created row was pending or leased when it
// was committed (its state as last known, should a read fail), and the
// interest in it was registered before, so its settling is not missed. An
// announcement that carries the state the row settled in, when that state
// is the whole answer (answersWhole), ends the wait without a read, and
// comes with its result decoded. A bare notification of a row this call
// leased to the engine of this process, arriving while that engine writes
// its completion (Config.Writing), is that write's own: its news follows
// once the write ended, and is waited for rather than the row read.
func (g *Gateway) await(ctx context.Context, key string, leased int64, settled <-chan *store.Call, gone <-chan struct{}, created bool, deadline time.Time) (store.Call, *sdk.CallToolResult, bool, error) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	tick := time.NewTicker(cmp.Or(g.recheck, recheck))
	defer tick.Stop()
	cause := ""
	read, known := !created || leased == 0, created
	var written <-chan struct{}                             // the engine's write of the row, waited for
	c := store.Call{Key: key, Status: outbox.StatusPending} // as committed, until read
	if leased != 0 {
		c.Status = outbox.StatusInFlight // created leased to this process's engine
	}
	for {
		if read {
			now, err := g.read(ctx, key, largeAnswer)
			if err != nil && ctx.Err() != nil {
				// The call's time ran out, or the gateway stops, in the read.
				return lastLooked(g.lastLook(ctx, c, known))
			}
			switch {
			case err != nil && !errors.Is(err, store.ErrNoCall):
				// A read the database refused (no connection to be had:
				// too many clients, say): the call is recorded, so it waits
				// on as for a read that stalls, and reads again at the next
				// news or recheck; its wait bounds it.
				g.log.Debug("gateway: a read of a call's row failed; reading again", "key", key, "err", err)
			case err != nil || now.Settled():
				if cause != "" && err == nil {
					g.metrics.settled.WithLabelValues(cause).Inc()
				}
				return now, nil, cause != "", err
			default:
				c, known = now, true
			}
		}
		read = true
		select {
		case s := <-settled:
			cause = "notify"
			if res, ok := answersWhole(s); ok {
				g.metrics.settled.WithLabelValues(cause).Inc()
				return *s, res, true, nil
			}
			if s == nil && leased != 0 && g.cfg.Writing != nil {
				if written = g.cfg.Writing(leased); written != nil {
					read = false
				}
			}
		case <-written:
			written = nil // written without news that answers: read
		case <-tick.C:
			cause = "recheck"
		case <-timer.C:
			// One last look: it may have settled this instant.
			return lastLooked(g.lastLook(ctx, c, known))
		case <-ctx.Done():
			return lastLooked(g.lastLook(ctx, c, known))
		case <-gone:
			return c, nil, false, errHungUp
		case <-g.closing:
			// the row's state now, for the answer (the daemon is stopping)
			return lastLooked(g.lastLook(ctx, c, known))
		}
	}
}

// lastLooked is lastLook's answer as await returns it: no result decoded.
func lastLooked(c store.Call, joined bool, err error) (store.Call, *sdk.CallToolResult, bool, error) {
	return c, nil, joined, err
}

// read reads the row of key, with its record when it is within limit bytes
// (budgeted reads a larger one), again on a live connection when its
// connection was lost.
func (g *Gateway) read(ctx context.Context, key string, limit int) (c store.Call, err error) {
	_, err = g.onLive(ctx, func(db store.DB) (err error) {
		c, err = g.cfg.Store.Call(ctx, db, key, limit)
		return err
	})
	return c, err
}

// lastLook reads the row of c once more, for the answer of a call whose
// wait is over (or that the gateway's shutdown ends), within
// lastLookTimeout. When that read fails, the row's state as last known
// answers, if this call knows it; the error otherwise.
func (g *Gateway) lastLook(ctx context.Context, c store.Call, known bool) (store.Call, bool, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lastLookTimeout)
	defer cancel()
	now, err := g.read(rctx, c.Key, largeAnswer)
	if err != nil && known && !errors.Is(err, store.ErrNoCall) {
		g.log.Info("gateway: could not read a call's row for its answer; answering with its state as last read", "key", c.Key, "err", err)
		return c, true, nil
	}
	return now, true, err
}

// callContext bounds a call: its context ends callMargin after its wait
// (deadline), or when Shutdown's grace ends. The SDK's handler context
// ends with neither (it does not follow the request's), so a read the
// database does not answer would otherwise hold the call, its slot and
// its connection.
func (g *Gateway) callContext(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithDeadline(ctx, deadline.Add(callMargin))
	stop := context.AfterFunc(g.base, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// The bounds of a call past its wait: callMargin for a read under way at
// the deadline to end (its context's deadline), lastLookTimeout for the
// read of its answer; so a call is answered within its wait and their sum.
// wakeTimeout bounds the wake-up of the daemons for a row not handed over.
const (
	callMargin      = 2 * time.Second
	lastLookTimeout = time.Second
	wakeTimeout     = 5 * time.Second
)

// passthrough sends a call of a read-only naturally idempotent tool
// straight to its server, unrecorded, with its key, once its route and
// adapter admit it (Config.Admit: pauses, breaker, rate limit, concurrency
// cap). sent says whether it went out.
func (g *Gateway) passthrough(ctx context.Context, t *Tool, key string, tuple idemkey.Tuple, payload []byte, tp string) (res *sdk.CallToolResult, sent bool) {
	meta := sdk.Meta{MetaKey: key}
	done := func(dispatch.Result) {}
	if g.cfg.Admit != nil {
		var err error
		if done, err = g.cfg.Admit(ctx, t.Name); err != nil {
			g.log.Info("gateway: a read-only call not sent", "tool", t.Name, "reason", err.Error())
			return errorResult(meta, fmt.Sprintf("%s (read-only tool, not recorded) was not sent: %v; call again later", t.Name, err)), false
		}
	}
	m := &dispatch.Message{Key: key, Tuple: tuple, Payload: payload, Attempt: 1, Traceparent: tp}
	r := t.Send(ctx, m)
	done(r)
	if _, tooLarge := recordTooLarge(r.Record); tooLarge && t.Oversized != nil {
		if full, ok := t.Oversized(key); ok {
			r.Record = full
		}
	}
	if len(r.Record) > 0 {
		if res, err := fromRecord(r.Record); err == nil {
			res.Meta = meta
			return res, true
		}
	}
	msg := "the tool server did not answer"
	if r.Err != nil {
		msg = r.Err.Error()
	}
	return errorResult(meta, fmt.Sprintf("%s (read-only tool, not recorded): %s; calling again is safe", t.Name, msg)), true
}

// invalidParams is the JSON-RPC error -32602 with msg.
func invalidParams(msg string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg}
}
