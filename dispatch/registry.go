package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Entry is one configured adapter instance.
type Entry struct {
	Name    string
	Type    string
	Adapter Adapter
	// Timeout bounds one attempt: the adapter applies it, and the engine
	// cuts off an attempt that outlasts it (by a second's grace).
	Timeout time.Duration
	// KeyTTL is the adapter's own key_ttl: the config's, else the type's
	// default, else (KeyTTLFromProvider) the window the provider reported
	// at start; 0 means unlimited. KeyTTLFor is the one that applies.
	KeyTTL time.Duration
	// KeyTTLFromProvider says the adapter has no key_ttl of its own: KeyTTL
	// is the provider's window, and follows it when it changes.
	KeyTTLFromProvider bool
	// ProviderWindow is the window the provider itself reported at start
	// (KeyTTLer), 0 when none was read: no route's key_ttl may exceed it.
	// A later reading (SetProviderWindow) takes its place; Window is the
	// current one. Set it before the entry is shared.
	ProviderWindow time.Duration

	// window is the latest reading since start, in nanoseconds; 0: none.
	window atomic.Int64
}

// Window is the provider's idempotency window as last read: the latest
// SetProviderWindow, else ProviderWindow; 0 when none was read.
func (e *Entry) Window() time.Duration {
	if w := time.Duration(e.window.Load()); w > 0 {
		return w
	}
	return e.ProviderWindow
}

// SetProviderWindow records a window the provider reported after start,
// shorter or longer, and returns the one it replaces: KeyTTLFor applies it
// from then on. A window that is not positive is ignored: the last one
// read is kept. It is safe to call while the engine reads the entry.
func (e *Entry) SetProviderWindow(w time.Duration) (old time.Duration) {
	old = e.Window()
	if w > 0 {
		e.window.Store(int64(w))
	}
	return old
}

// KeyTTLFor is the key_ttl that applies to a route of the adapter whose
// own key_ttl is route (0: none): the route's, else the adapter's, never
// longer than the window the provider reported last (Window); an adapter
// whose key_ttl is the provider's window (KeyTTLFromProvider) follows that
// window, longer or shorter.
func (e *Entry) KeyTTLFor(route time.Duration) time.Duration {
	window := e.Window()
	ttl := route
	if ttl == 0 && !(e.KeyTTLFromProvider && window > 0) {
		ttl = e.KeyTTL
	}
	if window > 0 && (ttl == 0 || ttl > window) {
		ttl = window
	}
	return ttl
}

// Registry maps configured adapter names to adapters. Its entries are
// fixed once built; it is safe for concurrent use. It also owns the
// goroutines started with Go, which Close stops before it closes the
// adapters.
type Registry struct {
	entries map[string]*Entry

	// The goroutines started with Go. mu orders their wg.Add before
	// Close's wg.Wait; ctx is made by the first Go; a zero Registry is a
	// valid empty one.
	mu     sync.Mutex
	closed bool
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewRegistry builds a registry from entries; names must be unique.
func NewRegistry(entries ...*Entry) (*Registry, error) {
	r := &Registry{entries: make(map[string]*Entry, len(entries))}
	for _, e := range entries {
		if e.Adapter == nil {
			return nil, fmt.Errorf("adapter %q: nil adapter", e.Name)
		}
		if _, dup := r.entries[e.Name]; dup {
			return nil, fmt.Errorf("adapter %q registered twice", e.Name)
		}
		r.entries[e.Name] = e
	}
	return r, nil
}

// Get returns the entry named name.
func (r *Registry) Get(name string) (*Entry, bool) {
	if r == nil {
		return nil, false
	}
	e, ok := r.entries[name]
	return e, ok
}

// Names returns the adapter names in sorted order.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	names := make([]string, 0, len(r.entries))
	for n := range r.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Go runs f in a goroutine of its own, for as long as the registry is
// open: Close cancels f's context and waits for f to return before it
// closes the adapters, so f must return soon once its context ends. After
// Close, f is not run.
func (r *Registry) Go(f func(ctx context.Context)) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if r.ctx == nil {
		r.ctx, r.cancel = context.WithCancel(context.Background())
	}
	r.wg.Add(1)
	ctx := r.ctx
	go func() {
		defer r.wg.Done()
		f(ctx)
	}()
}

// Close stops the goroutines started with Go, waits for them, then closes
// every adapter that implements io.Closer or a Close(context.Context) error
// method.
func (r *Registry) Close(ctx context.Context) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	r.closed = true
	if r.cancel != nil {
		r.cancel()
	}
	r.mu.Unlock()
	r.wg.Wait()
	var errs []error
	for _, n := range r.Names() {
		switch c := r.entries[n].Adapter.(type) {
		case interface{ Close(context.Context) error }:
			if err := c.Close(ctx); err != nil {
				errs = append(errs, fmt.Errorf("close adapter %q: %w", n, err))
			}
		case io.Closer:
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close adapter %q: %w", n, err))
			}
		}
	}
	return errors.Join(errs...)
}

// ErrUnavailable marks an adapter build error that says the provider could
// not be reached at startup (connection refused or lost, timeout, 408, 429,
// 5xx), not that the configuration is wrong: the daemon waits and tries
// again, as it does for the database, instead of exiting.
var ErrUnavailable = errors.New("provider unavailable")

// MarkUnavailable marks err as an ErrUnavailable, keeping its message.
func MarkUnavailable(err error) error { return unavailableError{err} }

type unavailableError struct{ err error }

func (e unavailableError) Error() string        { return e.err.Error() }
func (e unavailableError) Unwrap() error        { return e.err }
func (e unavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unavailable reports whether every part of err (a join of per-adapter
// errors, as Build returns) is an ErrUnavailable.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts := j.Unwrap()
		for _, e := range parts {
			if !Unavailable(e) {
				return false
			}
		}
		return len(parts) > 0
	}
	return errors.Is(err, ErrUnavailable)
}
