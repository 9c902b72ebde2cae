package drainer

import (
	"errors"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
)

// unsendableResult is what the http adapter returns for a row whose payload
// cannot fill its route's path.
var unsendableResult = dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: dispatch.ReasonUnsendable,
	Err: errors.New("path variable {order_id}: the payload has no such top-level field; nothing sent")}

// TestUnsendableIsNeutralToBreaker: a row that was never sent says nothing
// of the provider, so it neither resets the breaker's run of failures (as a
// terminal answer would) nor counts as one.
func TestUnsendableIsNeutralToBreaker(t *testing.T) {
	t.Parallel()
	g := newGate("api", GatePolicy{BreakerFailures: 2, BreakerOpenFor: time.Hour}, nil, slog.New(slog.DiscardHandler))
	r := rand.New(rand.NewPCG(1, 2))
	down := dispatch.Result{Outcome: dispatch.Retry, Status: 503}
	for i, res := range []dispatch.Result{down, unsendableResult, unsendableResult, down} {
		done, ref := g.admit(r, "update_order")
		if ref != nil {
			t.Fatalf("attempt %d refused (%s) before the second failure", i, ref.reason)
		}
		done(res)
	}
	if _, ref := g.admit(r, "update_order"); ref == nil || ref.reason != outbox.RefusedBreakerOpen {
		t.Fatalf("breaker not open after two failures around unsendable rows: %+v", ref)
	}
}

// TestUnsendableKeepsAuthHold: a route held for refused credentials stays
// held after an unsendable row (which asked the provider nothing).
func TestUnsendableKeepsAuthHold(t *testing.T) {
	t.Parallel()
	g := newGate("api", GatePolicy{}, nil, slog.New(slog.DiscardHandler))
	g.noteAuth("update_order", dispatch.Result{Outcome: dispatch.Auth, Status: 401})
	if g.holdLeft("update_order") <= 0 {
		t.Fatal("no hold after a 401")
	}
	g.noteAuth("update_order", unsendableResult)
	if g.holdLeft("update_order") <= 0 {
		t.Fatal("an unsendable row ended the auth hold")
	}
	g.noteAuth("update_order", dispatch.Result{Outcome: dispatch.Success, Status: 200})
	if g.holdLeft("update_order") > 0 {
		t.Fatal("a success did not end the auth hold")
	}
}
