package fleet

import (
	"context"
	"testing"
)

// TestBudget: a pool is admitted only while the replica holds fewer than
// its share; one let go makes room; a share that shrinks below what is
// held admits nothing until enough are let go. An acquire whose context
// has ended answers at once, so each refusal is seen without waiting.
func TestBudget(t *testing.T) {
	t.Parallel()
	b := newBudget()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	admit := func(want bool, when string) {
		t.Helper()
		if got := b.acquire(ended); got != want {
			held, share := b.counts()
			t.Fatalf("%s: admitted %v, want %v (held %d, share %d)", when, got, want, held, share)
		}
	}
	admit(false, "share 0")
	b.setShare(2)
	admit(true, "share 2, none held")
	admit(true, "share 2, one held")
	admit(false, "share 2, two held")
	b.setShare(1) // a member joined: one of the two is being let go
	b.release()
	admit(false, "share 1, one still held")
	b.release()
	admit(true, "share 1, both let go")

	// A waiter is admitted once a pool is let go.
	got := make(chan bool)
	go func() { got <- b.acquire(context.Background()) }()
	b.release()
	if !<-got {
		t.Fatal("a waiter was not admitted once a pool was let go")
	}
	if held, share := b.counts(); held != 1 || share != 1 {
		t.Errorf("held %d, share %d; want 1, 1", held, share)
	}
}
