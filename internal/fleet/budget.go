package fleet

import (
	"context"
	"sync"
)

// budget is a replica's connection budget, counted in pools (each of at
// most Config.PoolConns connections, fixed before it opens): a database's
// pool opens only while the replica holds fewer pools than its share, the
// databases the assignment gives it, and counts until it has closed. So a
// replica never opens a connection beyond 1 + PoolConns × share (the 1 is
// the coordination connection), however its goroutines are scheduled; a
// database handed to a replica that is still letting another go waits for
// that pool to close. When the share shrinks (a member joined), the pools
// already open stay counted until their databases are let go, and none
// opens until the count is under the new share.
type budget struct {
	mu      sync.Mutex
	share   int
	held    int
	changed chan struct{} // closed and replaced at every change
}

func newBudget() *budget { return &budget{changed: make(chan struct{})} }

// broadcastLocked wakes every acquire waiting.
func (b *budget) broadcastLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// setShare sets how many pools the replica may hold.
func (b *budget) setShare(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n != b.share {
		b.share = n
		b.broadcastLocked()
	}
}

// acquire waits until a pool may open and counts it; false when ctx ended
// first.
func (b *budget) acquire(ctx context.Context) bool {
	for {
		b.mu.Lock()
		if b.held < b.share {
			b.held++
			b.mu.Unlock()
			return true
		}
		changed := b.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// release uncounts a pool once it has closed.
func (b *budget) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held--
	b.broadcastLocked()
}

// counts returns the pools held and the share.
func (b *budget) counts() (held, share int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held, b.share
}
