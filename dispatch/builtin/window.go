package builtin

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
)

// DefaultWindowRefresh is how often the idempotency window of a provider
// that reported one at start is read again: a window changed while the
// daemon runs (a nats stream's Duplicates shortened) reaches the key-TTL
// guard within this interval.
const DefaultWindowRefresh = time.Minute

// windowWatch reads one adapter's provider window again and again and
// hands each reading to its entry, where the key-TTL guard reads it.
type windowWatch struct {
	entry *dispatch.Entry
	read  dispatch.KeyTTLer
	log   *slog.Logger
	// failing is set from a failed reading to the next good one: a
	// failure streak is warned about once.
	failing bool
	// unread: no window has been read yet (the provider was unreachable
	// at start); until one is, failures are logged at debug level only.
	unread bool
}

// watchWindows starts, as goroutines of reg (stopped by reg.Close before
// the adapters close), a refresh every interval (0: DefaultWindowRefresh)
// for each adapter whose provider reported its window at start, or whose
// window could not be read at start (configured.unread): its first reading
// then applies within an interval of the provider becoming reachable.
func watchWindows(reg *dispatch.Registry, ready []configured, every time.Duration) {
	if every <= 0 {
		every = DefaultWindowRefresh
	}
	for _, c := range ready {
		t, reports := c.entry.Adapter.(dispatch.KeyTTLer)
		if !reports || (c.entry.ProviderWindow <= 0 && !c.unread) {
			continue
		}
		w := &windowWatch{entry: c.entry, read: t, log: c.log, unread: c.unread}
		reg.Go(func(ctx context.Context) { w.run(ctx, every) })
	}
}

// run refreshes the window every interval until ctx ends.
func (w *windowWatch) run(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			w.refresh(ctx)
		}
	}
}

// refresh reads the window once and applies it. A failed reading keeps
// the last window: rows are never failed because the provider could not
// be asked.
func (w *windowWatch) refresh(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, w.timeout())
	window, err := w.read.KeyTTL(rctx)
	cancel()
	if ctx.Err() != nil {
		return // closing
	}
	if err == nil && window <= 0 {
		err = fmt.Errorf("the provider reported a window of %s", window)
	}
	if err != nil {
		w.failed(err)
		return
	}
	if w.failing {
		w.failing = false
		w.log.Info("the provider's idempotency window can be read again", "window", window)
	}
	before := w.entry.KeyTTLFor(0)
	old := w.entry.SetProviderWindow(window)
	if window == old {
		return
	}
	after := w.entry.KeyTTLFor(0)
	if w.unread {
		w.unread = false
		level := slog.LevelInfo
		if after != before {
			level = slog.LevelWarn
		}
		w.log.Log(ctx, level, "the provider's idempotency window, unread at start, was read: the key-TTL guard applies it from now on"+windowOf(w.entry.Type),
			"window", window, "key_ttl", after, "key_ttl_before", before)
		warnWithinMargin(w.log, after)
		return
	}
	if window < old {
		w.log.Warn("the provider's idempotency window was shortened: the key-TTL guard applies the new window from now on"+windowOf(w.entry.Type),
			"old_window", old, "new_window", window, "key_ttl", after)
	} else {
		w.log.Info("the provider's idempotency window was lengthened", "old_window", old, "new_window", window, "key_ttl", after)
	}
	if after != before {
		warnWithinMargin(w.log, after)
	}
}

// failed notes a failed reading: a warning for the first of a streak, the
// others at debug level.
func (w *windowWatch) failed(err error) {
	if w.failing || w.unread {
		w.log.Debug("the provider's idempotency window still cannot be read", "err", err)
		return
	}
	w.failing = true
	w.log.Warn("the provider's idempotency window cannot be read; the key-TTL guard keeps the last one read until it can",
		"window", w.entry.Window(), "err", err)
}

// timeout bounds one reading: the adapter's attempt timeout.
func (w *windowWatch) timeout() time.Duration {
	if w.entry.Timeout > 0 {
		return w.entry.Timeout
	}
	return config.DefaultAdapterTimeout
}

// windowOf names what a provider's idempotency window is, for the types
// whose window has a name of its own.
func windowOf(typ string) string {
	if typ == "nats" {
		return " (the stream's duplicate window, Duplicates)"
	}
	return ""
}
