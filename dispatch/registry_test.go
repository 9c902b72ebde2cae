package dispatch

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestKeyTTLForFollowsWindow: the key_ttl that applies follows the window
// the provider reported last. An adapter whose key_ttl is the provider's
// follows it both ways; one with a key_ttl of its own (or a route's) is
// bounded by a shorter window and gets its own back when the window grows.
func TestKeyTTLForFollowsWindow(t *testing.T) {
	t.Parallel()
	follow := &Entry{KeyTTL: 10 * time.Minute, KeyTTLFromProvider: true, ProviderWindow: 10 * time.Minute}
	own := &Entry{KeyTTL: 5 * time.Minute, ProviderWindow: 10 * time.Minute}
	check := func(when string, e *Entry, route, want time.Duration) {
		t.Helper()
		if got := e.KeyTTLFor(route); got != want {
			t.Errorf("%s: KeyTTLFor(%s) = %s, want %s", when, route, got, want)
		}
	}
	check("at start", follow, 0, 10*time.Minute)
	check("at start", own, 0, 5*time.Minute)
	check("at start", own, 3*time.Hour, 10*time.Minute)
	for _, e := range []*Entry{follow, own} {
		if old := e.SetProviderWindow(2 * time.Minute); old != 10*time.Minute {
			t.Errorf("SetProviderWindow returned %s, want the window it replaced, 10m", old)
		}
	}
	check("shortened", follow, 0, 2*time.Minute)
	check("shortened", own, 0, 2*time.Minute)
	check("shortened", own, time.Minute+30*time.Second, time.Minute+30*time.Second)
	follow.SetProviderWindow(20 * time.Minute)
	own.SetProviderWindow(20 * time.Minute)
	check("lengthened", follow, 0, 20*time.Minute)
	check("lengthened", own, 0, 5*time.Minute)
	check("lengthened", own, 3*time.Hour, 20*time.Minute)
	if old := own.SetProviderWindow(0); old != 20*time.Minute || own.Window() != 20*time.Minute {
		t.Errorf("a window of 0 replaced %s by %s, want it ignored", old, own.Window())
	}
}

// TestRegistryGoStoppedByClose: Close cancels the goroutines started with
// Go and waits for them before it returns; Go after Close runs nothing.
// A zero Registry closes too.
func TestRegistryGoStoppedByClose(t *testing.T) {
	t.Parallel()
	r, err := NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	started, stopped := make(chan struct{}), false
	r.Go(func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		mu.Lock()
		stopped = true
		mu.Unlock()
	})
	<-started
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if !stopped {
		t.Error("Close returned before the goroutine started with Go returned")
	}
	mu.Unlock()
	r.Go(func(context.Context) { t.Error("Go after Close ran its function") })
	if err := r.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := new(Registry).Close(context.Background()); err != nil {
		t.Errorf("zero Registry: %v", err)
	}
}
