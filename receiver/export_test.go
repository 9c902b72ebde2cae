package receiver

import (
	"context"
	"sync"
	"time"
)

// LapseBounds replaces rc's bounds on store steps (completionTimeout) with
// ones that never lapse on their own, and returns a function that makes
// every bound taken so far lapse at once: a test calls it from a handler to
// stand for a handler that ran longer than the bound, without waiting.
func LapseBounds(rc *Receiver) (lapse func()) {
	var (
		mu      sync.Mutex
		cancels []context.CancelFunc
	)
	rc.withTimeout = func(parent context.Context, _ time.Duration) (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(parent)
		mu.Lock()
		cancels = append(cancels, cancel)
		mu.Unlock()
		return ctx, cancel
	}
	return func() {
		mu.Lock()
		defer mu.Unlock()
		for _, cancel := range cancels {
			cancel()
		}
	}
}
