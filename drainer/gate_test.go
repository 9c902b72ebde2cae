package drainer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// TestWaitSlot: rows an adapter's max_concurrency turned away wait for a
// slot in the order they came, no more of them than waitCap, each no
// longer than its wait or its context.
func TestWaitSlot(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	g := newGate("a", GatePolicy{MaxConcurrency: 1}, nil, nil)
	g.waitCap.Store(2)
	done, ref := g.admit(r, "t")
	if ref != nil {
		t.Fatalf("first row refused: %v", ref.reason)
	}
	if _, ref := g.admit(r, "t"); ref == nil || ref.reason != outbox.RefusedSaturated {
		t.Fatalf("second row: refusal %v, want %v", ref, outbox.RefusedSaturated)
	}

	// Two rows wait, one after the other; a third finds the waiting room full.
	got := make(chan string, 2)
	wait := func(name string) {
		if g.waitSlot(t.Context(), time.Minute) {
			got <- name
		} else {
			got <- name + " gave up"
		}
	}
	for i, name := range []string{"first", "second"} {
		go wait(name)
		testkit.WaitFor(t, time.Minute, name+" waiting", func() (bool, string) {
			n := parkedIn("drainer.(*gate).waitSlot")
			return n == i+1, fmt.Sprintf("%d parked", n)
		})
	}
	third := make(chan bool, 1)
	go func() { third <- g.waitSlot(t.Context(), time.Minute) }()
	testkit.WaitFor(t, time.Minute, "the third row turned away", func() (bool, string) {
		select {
		case took := <-third:
			if took {
				t.Fatal("a third row took a slot while two waited for the only one")
			}
			return true, ""
		default:
		}
		if n := parkedIn("drainer.(*gate).waitSlot"); n > 2 {
			t.Fatalf("%d rows wait for a slot, waitCap is 2", n)
		}
		return false, "neither turned away nor waiting yet"
	})

	// Each slot given back goes to the row that waited longest.
	done(dispatch.Result{Outcome: dispatch.Success})
	if name := <-got; name != "first" {
		t.Fatalf("the freed slot went to %q, want the first row waiting", name)
	}
	// The first row's slot, taken over by its admission and given back by
	// its attempt's end.
	firstDone, _, ref := g.admitWithin(r, "t", 0, true)
	if ref != nil {
		t.Fatalf("the first row, holding its slot, refused: %v", ref.reason)
	}
	firstDone(dispatch.Result{Outcome: dispatch.Success})
	if name := <-got; name != "second" {
		t.Fatalf("the next slot went to %q, want the second row", name)
	}
	if g.waiting.Load() != 0 {
		t.Fatalf("%d rows still counted as waiting", g.waiting.Load())
	}

	// The second row holds the slot: a wait ends at its bound, or with its
	// context, without a slot.
	if g.waitSlot(t.Context(), 20*time.Millisecond) {
		t.Fatal("took a slot that was held throughout")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if g.waitSlot(ctx, time.Minute) {
		t.Fatal("took a slot after its context ended")
	}
	if g.waiting.Load() != 0 {
		t.Fatalf("%d rows still counted as waiting after giving up", g.waiting.Load())
	}
	// A row holding a slot that its admission turns away gives it back.
	<-g.slots // the second row's slot, as its attempt's end would
	g.slots <- struct{}{}
	g.held["t"] = &hold{since: time.Now(), until: time.Now().Add(time.Minute)}
	if _, _, ref := g.admitWithin(r, "t", 0, true); ref == nil || ref.reason != outbox.RefusedAuthHold {
		t.Fatalf("held route admitted: refusal %v", ref)
	}
	if len(g.slots) != 0 {
		t.Fatalf("%d slots still taken after the refusal", len(g.slots))
	}
}

// parkedIn counts the goroutines blocked in a select or a channel
// operation inside fn: parked, so queued on the channel in the order they
// got there.
func parkedIn(fn string) int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		if (strings.Contains(head, "[select") || strings.Contains(head, "[chan send")) && strings.Contains(g, fn) {
			n++
		}
	}
	return n
}

// admit is admitWithin for a row that waits for nothing: the token only if
// it is free now, no slot held.
func (g *gate) admit(r *rand.Rand, route string) (done func(dispatch.Result), ref *refusal) {
	done, _, ref = g.admitWithin(r, route, 0, false)
	return done, ref
}
