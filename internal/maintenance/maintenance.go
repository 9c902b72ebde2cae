package maintenance

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Service is background work with a lifecycle.
type Service interface {
	// Start starts the work and returns once it runs.
	Start(ctx context.Context) error
	// Stop ends the work and waits for it (or for ctx).
	Stop(ctx context.Context) error
}

// Loop runs Run(ctx) in a goroutine of its own until Stop cancels ctx.
type Loop struct {
	Name string
	Run  func(ctx context.Context)

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

var _ Service = (*Loop)(nil)

// Start starts the loop. The context passed to Run is not derived from ctx:
// the loop runs until Stop.
func (l *Loop) Start(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		return errors.New(l.Name + ": already started")
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel, l.done = cancel, make(chan struct{})
	go func() {
		defer close(l.done)
		l.Run(ctx)
	}()
	return nil
}

// Stop cancels the loop's context and waits for Run to return, or for ctx.
func (l *Loop) Stop(ctx context.Context) error {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return errors.New(l.Name + ": did not stop in time")
	}
}

// Periodic returns a loop that calls tick at once, then every Interval()
// (read again after each tick, so a reload may change it), and whenever
// wake (which may be nil) receives.
func Periodic(name string, interval func() time.Duration, wake <-chan struct{}, tick func(ctx context.Context)) *Loop {
	return &Loop{Name: name, Run: func(ctx context.Context) {
		for {
			tick(ctx)
			t := time.NewTimer(interval())
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			case <-wake:
				t.Stop()
			}
		}
	}}
}

// Every is an interval that never changes.
func Every(d time.Duration) func() time.Duration { return func() time.Duration { return d } }

// Group starts services in order and stops them in reverse order.
type Group struct {
	started []Service
}

// Start starts each service; if one fails, those already started are
// stopped and the error returned.
func (g *Group) Start(ctx context.Context, services ...Service) error {
	for _, s := range services {
		if err := s.Start(ctx); err != nil {
			return errors.Join(err, g.Stop(ctx))
		}
		g.started = append(g.started, s)
	}
	return nil
}

// Stop stops the started services, last first.
func (g *Group) Stop(ctx context.Context) error {
	var errs []error
	for i := len(g.started) - 1; i >= 0; i-- {
		errs = append(errs, g.started[i].Stop(ctx))
	}
	g.started = nil
	return errors.Join(errs...)
}
