package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
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
	// KeyTTL is the provider's idempotency window; 0 means unlimited.
	KeyTTL time.Duration
	// ProviderWindow is the window the provider itself reported at start
	// (KeyTTLer), 0 when none was read: no route's key_ttl may exceed it.
	ProviderWindow time.Duration
}

// KeyTTLFor is the key_ttl that applies to a route of the adapter whose
// own key_ttl is route (0: none): the route's, else the adapter's, never
// longer than the window the provider reported.
func (e *Entry) KeyTTLFor(route time.Duration) time.Duration {
	ttl := route
	if ttl == 0 {
		ttl = e.KeyTTL
	}
	if e.ProviderWindow > 0 && (ttl == 0 || ttl > e.ProviderWindow) {
		ttl = e.ProviderWindow
	}
	return ttl
}

// Registry maps configured adapter names to adapters. It is immutable once
// built and safe for concurrent use.
type Registry struct {
	entries map[string]*Entry
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

// Close closes every adapter that implements io.Closer or a
// Close(context.Context) error method.
func (r *Registry) Close(ctx context.Context) error {
	if r == nil {
		return nil
	}
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
