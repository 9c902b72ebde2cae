package fleet

import (
	"context"
	"testing"
	"time"
)

// TestStartSlotsLeaveRoomForFirstStarts: retried starts (databases that
// keep failing, each holding its slot for up to a start_timeout) hold at
// most half the start slots; a database started for the first time still
// finds one while they all wait, and a further retry waits for a retry
// slot, not a first start's.
func TestStartSlotsLeaveRoomForFirstStarts(t *testing.T) {
	t.Parallel()
	f := &Fleet{starts: make(chan struct{}, startConcurrency), retries: make(chan struct{}, startConcurrency/2)}
	ctx := context.Background()
	var held []func()
	for range startConcurrency / 2 {
		release, ok := f.startSlot(ctx, true)
		if !ok {
			t.Fatal("a retry found no slot while the slots were free")
		}
		held = append(held, release)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, ok := f.startSlot(short, true); ok {
		t.Fatal("a retry took a slot beyond half of them")
	}
	for range startConcurrency - startConcurrency/2 {
		release, ok := f.startSlot(ctx, false)
		if !ok {
			t.Fatal("a first start found no slot beside the retries")
		}
		held = append(held, release)
	}
	for _, release := range held {
		release()
	}
	if len(f.starts) != 0 || len(f.retries) != 0 {
		t.Fatalf("slots left taken after every release: %d starts, %d retries", len(f.starts), len(f.retries))
	}
}
