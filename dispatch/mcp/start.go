package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/drainer-io/drainer/dispatch"
)

// Delays of a background start: the first retry, and the cap of the
// doubling between them.
const (
	bgFirstDelay = 250 * time.Millisecond
	bgMaxDelay   = 5 * time.Second
)

// notReadyRetry is the floor under a waiting row's next try: the rows of an
// adapter still connecting come back about this often, without an attempt.
const notReadyRetry = time.Second

// missingToolRetry is the floor for a row whose tool the server lacks.
const missingToolRetry = 30 * time.Second

// StartInBackground keeps connecting to the server until it answers, then
// reads tools/list and checks routes as CheckRoutes does. Until then every
// Dispatch answers Retry, NotSent, reason ReasonNotReady: the engine gives
// the row back without consuming an attempt, and other adapters are not
// held (the circuit breaker does not count these). A route naming a tool
// the server lacks is logged as an error naming the tool and the adapter,
// and its rows keep waiting (ReasonNotReady, with an error naming the tool)
// until a config reload; the other routes drain. Close stops it.
func (a *Adapter) StartInBackground(name string, routes []Route, log *slog.Logger) {
	if log == nil {
		log = a.cfg.Logger
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	a.bgMu.Lock()
	a.stopBG, a.bgDone = cancel, done
	a.bgMu.Unlock()
	a.connecting.Store(true)
	go func() {
		defer close(done)
		delay := bgFirstDelay
		for attempt := 1; ; attempt++ {
			missing, err := a.checkRoutes(ctx, name, routes, log)
			if err == nil {
				if len(missing) > 0 {
					a.missing.Store(&missing)
					for _, e := range missing {
						log.Error("mcp: a route names a tool the server lacks; its rows wait (no attempt consumed) until the config is fixed and reloaded", "err", e)
					}
				}
				a.connecting.Store(false)
				rev, stateless := a.Negotiated()
				log.Info("mcp: connected to the server; its rows drain now", "revision", rev, "stateless", stateless, "tries", attempt)
				return
			}
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, dispatch.ErrUnavailable) {
				log.Warn("mcp: server unreachable; connecting in the background (its rows wait, other adapters drain)",
					"err", err, "retry_in", delay)
			} else {
				log.Error("mcp: the server refused the start; retrying in the background (its rows wait)", "err", err, "retry_in", delay)
			}
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			delay = min(delay*2, bgMaxDelay)
		}
	}()
}

// Ready reports whether the adapter is not waiting for a background start.
func (a *Adapter) Ready() bool { return !a.connecting.Load() }

// admit holds back a row while a background start is under way, or when the
// server lacks its tool: Retry, NotSent (no attempt consumed).
func (a *Adapter) admit(tool string) (dispatch.Result, bool) {
	if a.connecting.Load() {
		return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: ReasonNotReady, RetryAfter: notReadyRetry,
			Err: errors.New("mcp: the server has not been reachable since startup; connecting in the background (not sent)")}, false
	}
	if m := a.missing.Load(); m != nil {
		if err, ok := (*m)[tool]; ok {
			return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: ReasonNotReady, RetryAfter: missingToolRetry,
				Err: fmt.Errorf("%w (not sent)", err)}, false
		}
	}
	return dispatch.Result{}, true
}
