package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/drainer-io/drainer/dispatch"
)

// missingToolRetry is the floor for a row whose tool the server lacks.
const missingToolRetry = 30 * time.Second

// StartInBackground keeps connecting to the server until it answers, then
// reads tools/list and checks routes as CheckRoutes does. Until then every
// Dispatch answers Retry, NotSent, reason ReasonNotReady: the engine gives
// the row back without consuming an attempt, and other adapters are not
// held (the circuit breaker does not count these). A route naming a tool
// the server lacks is logged as an error naming the tool and the adapter,
// and its rows keep waiting (ReasonNotReady, with an error naming the tool)
// until a config reload; the other routes drain. The tries follow
// dispatch.Background (a doubling delay up to 5 s). Close stops it.
func (a *Adapter) StartInBackground(name string, routes []Route, log *slog.Logger) {
	if log == nil {
		log = a.cfg.Logger
	}
	a.bg.Start(log, "mcp", "server", func(ctx context.Context) error {
		missing, err := a.checkRoutes(ctx, name, routes, log)
		if err != nil {
			return err
		}
		// Recorded before the rows drain (Background ends Waiting on return).
		if len(missing) > 0 {
			a.missing.Store(&missing)
			for _, e := range missing {
				log.Error("mcp: a route names a tool the server lacks; its rows wait (no attempt consumed) until the config is fixed and reloaded", "err", e)
			}
		}
		rev, stateless := a.Negotiated()
		log.Info("mcp: connected to the server", "revision", rev, "stateless", stateless)
		return nil
	})
}

// Ready reports whether the adapter is not waiting for a background start.
func (a *Adapter) Ready() bool { return !a.bg.Waiting() }

// admit holds back a row while a background start is under way, or when the
// server lacks its tool: Retry, NotSent (no attempt consumed).
func (a *Adapter) admit(tool string) (dispatch.Result, bool) {
	if a.bg.Waiting() {
		return dispatch.NotReady(errors.New("mcp: the server has not been reachable since startup; connecting in the background (not sent)")), false
	}
	if m := a.missing.Load(); m != nil {
		if err, ok := (*m)[tool]; ok {
			return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, AwaitsFix: true, Reason: ReasonNotReady, RetryAfter: missingToolRetry,
				Err: fmt.Errorf("%w (not sent)", err)}, false
		}
	}
	return dispatch.Result{}, true
}
