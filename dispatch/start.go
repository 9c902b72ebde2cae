package dispatch

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// StartProbed is the Start of an adapter that must reach its provider:
// newAdapter builds it, probe makes the first contact. A provider that
// cannot be reached yet (probe's error is ErrUnavailable) does not fail the
// start, so that it never holds the other adapters: unreachable is logged
// with the error, background keeps trying while the adapter's rows wait
// (no attempt consumed), and the adapter is returned. Any other error of
// probe (a refusal, a misconfigured route) closes the adapter, by its
// Close(context.Context) error or Close() error method, and fails the
// start.
func StartProbed[A Adapter](log *slog.Logger, unreachable string, newAdapter func() (A, error),
	probe func(context.Context, A) error, background func(A)) Start {
	return func(ctx context.Context) (Adapter, error) {
		ad, err := newAdapter()
		if err != nil {
			return nil, err
		}
		err = probe(ctx, ad)
		if errors.Is(err, ErrUnavailable) {
			if log != nil {
				log.Warn(unreachable, "err", err)
			}
			background(ad)
			return ad, nil
		}
		if err != nil {
			closeAdapter(ad)
			return nil, err
		}
		return ad, nil
	}
}

// closeAdapter closes a, whichever of the two Close methods it has.
func closeAdapter(a Adapter) {
	switch c := a.(type) {
	case interface{ Close(context.Context) error }:
		_ = c.Close(context.Background())
	case io.Closer:
		_ = c.Close()
	}
}

// Delays of a Background start: the first retry, and the cap of the
// doubling between them; and the floor under a waiting row's next try.
const (
	backgroundFirstDelay = 250 * time.Millisecond
	backgroundMaxDelay   = 5 * time.Second
	notReadyRetry        = time.Second
)

// Background is the background start of an adapter whose provider could
// not be reached when it started (StartProbed's background): it makes the
// adapter's first contact again, 250 ms later, then with a delay doubling
// up to 5 s, until that succeeds or Stop is called. Until then Waiting is true and
// the adapter answers its rows with NotReady. The zero value is not
// waiting: an adapter that reached its provider at once never starts one.
type Background struct {
	waiting atomic.Bool
	// refused holds the error of the last try when the provider answered
	// and refused (not ErrUnavailable); nil while it is unreachable.
	refused atomic.Pointer[string]
	logged  time.Time // the last line logTry wrote (the start's goroutine only)
	mu      sync.Mutex
	stop    context.CancelFunc
	done    chan struct{}
}

// Start begins the background start, the first try a delay after the one
// that failed: probe is the adapter's first contact (nil once it
// succeeded); typ and what name the adapter type and its provider in the
// log lines ("postgres", "database"); log is the adapter's logger, which
// names it. A probe's ErrUnavailable is logged as a warning, any
// other error (the provider answered and refused) as an error: both are
// tried again.
func (b *Background) Start(log *slog.Logger, typ, what string, probe func(context.Context) error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.mu.Lock()
	b.stop, b.done = cancel, done
	b.mu.Unlock()
	b.waiting.Store(true)
	go func() {
		defer close(done)
		delay := backgroundFirstDelay
		for tries := 1; ; tries++ {
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			err := probe(ctx)
			if err == nil {
				b.waiting.Store(false)
				log.Info(typ+": the "+what+" answered; the adapter's rows drain now", "tries", tries)
				return
			}
			if ctx.Err() != nil {
				return
			}
			delay = min(delay*2, backgroundMaxDelay)
			b.logTry(log, typ, what, err, delay)
		}
	}()
}

// logTry logs a failed try: at once when the provider's answer changed
// (unreachable, or refusing, or refusing otherwise), else at most once a
// minute, so a provider that stays down costs a line a minute, not one per
// try.
func (b *Background) logTry(log *slog.Logger, typ, what string, err error, delay time.Duration) {
	var now *string
	if !errors.Is(err, ErrUnavailable) {
		s := err.Error()
		now = &s
	}
	before := b.refused.Swap(now)
	changed := (before == nil) != (now == nil) || (now != nil && *before != *now)
	if !changed && time.Since(b.logged) < time.Minute {
		return
	}
	b.logged = time.Now()
	if now == nil {
		log.Warn(typ+": "+what+" unreachable; connecting in the background (its rows wait, other adapters drain)", "err", err, "retry_in", delay)
	} else {
		log.Error(typ+": the "+what+" refused the start; retrying in the background (its rows wait)", "err", err, "retry_in", delay)
	}
}

// Why says why the adapter cannot send yet, its provider named what ("the
// database"): not reachable since startup, or reachable and refusing the
// start (the refusal said).
func (b *Background) Why(what string) string {
	if r := b.refused.Load(); r != nil {
		return what + " answered but refused the start (" + *r + "); trying again in the background"
	}
	return what + " has not been reachable since startup; connecting in the background"
}

// Waiting reports whether a background start has not succeeded yet.
func (b *Background) Waiting() bool { return b.waiting.Load() }

// Stop ends a background start under way and waits for it to return (a
// probe under way first ends). The adapter's Close calls it first.
func (b *Background) Stop() {
	b.mu.Lock()
	stop, done := b.stop, b.done
	b.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// NotReady is the answer to a row of an adapter whose provider has not
// answered since startup: Retry, NotSent, ReasonNotReady (no attempt
// consumed, the circuit breaker not counting), looked at again in a
// second. err says why (the engine's note says the row was not sent).
func NotReady(err error) Result {
	return Result{Outcome: Retry, NotSent: true, Reason: ReasonNotReady, RetryAfter: notReadyRetry, Err: err}
}
