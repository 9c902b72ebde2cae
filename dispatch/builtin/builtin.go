package builtin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"

	// The adapter types: each registers its kind (its settings, their
	// rules, how it is built) in package dispatch, the one table `drainer
	// check` and `drainer run` read.
	"github.com/drainer-io/drainer/dispatch/execplugin"
	_ "github.com/drainer-io/drainer/dispatch/kafka"
	_ "github.com/drainer-io/drainer/dispatch/mcp"
	_ "github.com/drainer-io/drainer/dispatch/natsjs"
	_ "github.com/drainer-io/drainer/dispatch/pgtable"
	_ "github.com/drainer-io/drainer/dispatch/riverjob"
	_ "github.com/drainer-io/drainer/dispatch/stripe"
	_ "github.com/drainer-io/drainer/dispatch/webhook"
)

// Options carries what adapters need beyond their config.
type Options struct {
	Logger *slog.Logger
	// Version goes into User-Agent headers.
	Version string
	// WindowRefresh is how often the idempotency window of a provider
	// that reported one at start is read again (0: DefaultWindowRefresh).
	WindowRefresh time.Duration
}

// DefaultKeyTTL is the provider idempotency window assumed per adapter type
// when the config leaves key_ttl unset and the adapter reports none (0:
// unlimited): each registered kind's DefaultKeyTTL.
var DefaultKeyTTL = func() map[string]time.Duration {
	m := make(map[string]time.Duration)
	for _, typ := range dispatch.KindTypes() {
		k, _ := dispatch.KindOf(typ)
		m[typ] = k.DefaultKeyTTL
	}
	return m
}()

// configured is an adapter whose settings passed its type's Configure:
// ready to start.
type configured struct {
	entry *dispatch.Entry
	start dispatch.Start
	log   *slog.Logger
	// unread: the adapter has a key_ttl of its own and its provider
	// reports a window, which could not be read at start (the provider
	// unreachable then): it is read later (watchWindows).
	unread bool
}

// Build builds every configured adapter. Errors are joined, each naming the
// adapter and its line in the config file.
func Build(ctx context.Context, cfg *config.Config, opts Options) (*dispatch.Registry, error) {
	ready, err := configure(cfg, opts)
	if err != nil {
		return nil, err
	}
	var entries []*dispatch.Entry
	var errs []error
	for i := range ready {
		c := &ready[i]
		if err := start(ctx, c); err != nil {
			errs = append(errs, located(cfg, c.entry.Name, err)...)
			continue
		}
		entries = append(entries, c.entry)
	}
	if len(errs) > 0 {
		for _, e := range entries {
			closeAdapter(e.Adapter)
		}
		return nil, errors.Join(errs...)
	}
	reg, err := dispatch.NewRegistry(entries...)
	if err != nil {
		return nil, err
	}
	watchWindows(reg, ready, opts.WindowRefresh)
	return reg, nil
}

// configure runs every adapter type's Configure: each adapter's runtime
// config built from its settings and validated, nothing connected yet.
func configure(cfg *config.Config, opts Options) ([]configured, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var ready []configured
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(cfg.Adapters)) {
		a := cfg.Adapters[name]
		kind, ok := dispatch.KindOf(a.Type)
		if !ok || a.Settings == nil {
			errs = append(errs, located(cfg, name, fmt.Errorf("unknown adapter type %q (valid: %v)", a.Type, config.AdapterTypes()))...)
			continue
		}
		timeout := a.Timeout
		if timeout == 0 {
			timeout = config.DefaultAdapterTimeout
		}
		alog := log.With("adapter", name)
		start, err := kind.Configure(dispatch.BuildInput{
			Name: name, Settings: a.Settings, Timeout: timeout, MaxConcurrency: a.MaxConcurrency,
			KeyTTL: a.KeyTTL, Routes: cfg.RoutesServedBy(name), Logger: alog, Version: opts.Version,
		})
		if err != nil {
			errs = append(errs, located(cfg, name, err)...)
			continue
		}
		ready = append(ready, configured{
			entry: &dispatch.Entry{Name: name, Type: a.Type, Timeout: timeout, KeyTTL: a.KeyTTL},
			start: start, log: alog,
		})
	}
	return ready, errors.Join(errs...)
}

// start connects one configured adapter and settles its key_ttl: the
// config's, else the one the provider reports, else the type's default.
// The provider's window bounds every key_ttl of the adapter (KeyTTLFor).
func start(ctx context.Context, c *configured) error {
	e := c.entry
	ad, err := c.start(ctx)
	if err != nil {
		return err
	}
	e.Adapter = ad
	t, reports := ad.(dispatch.KeyTTLer)
	switch {
	case e.KeyTTL == 0 && reports:
		ttl, err := t.KeyTTL(ctx)
		if err != nil {
			closeAdapter(ad)
			return fmt.Errorf("read key_ttl from the provider: %w", err)
		}
		e.KeyTTL, e.ProviderWindow = ttl, ttl
		e.KeyTTLFromProvider = ttl > 0
	case e.KeyTTL == 0:
		e.KeyTTL = DefaultKeyTTL[e.Type]
	case reports:
		// A key_ttl longer than the window the provider keeps keys for
		// would let a retry past that window repeat the effect: the
		// provider's shorter window wins (when it can be read now), for
		// the routes' own key_ttl too (Entry.KeyTTLFor). The config's
		// key_ttl is kept: it applies again if the window grows past it.
		ttl, err := t.KeyTTL(ctx)
		if err == nil && ttl > 0 {
			e.ProviderWindow = ttl
		}
		c.unread = err != nil && !errors.Is(err, execplugin.ErrKeyTTLNotReported)
		if err == nil && ttl > 0 && ttl < e.KeyTTL {
			c.log.Warn("key_ttl is longer than the idempotency window the provider reports: the provider's window is used, so a retry past it fails by the key-TTL guard rather than repeat the effect"+windowOf(e.Type),
				"key_ttl", e.KeyTTL, "provider_window", ttl)
		}
	}
	warnWithinMargin(c.log, e.KeyTTLFor(0))
	c.log.Debug("adapter built", "type", e.Type, "timeout", e.Timeout, "key_ttl", e.KeyTTLFor(0))
	return nil
}

// warnWithinMargin warns when the key_ttl an adapter applies, ttl, is not
// longer than the key-TTL guard's margin.
func warnWithinMargin(log *slog.Logger, ttl time.Duration) {
	if ttl > 0 && ttl <= config.KeyTTLMargin {
		log.Warn("the idempotency window is not longer than the key-TTL guard's margin: every key_idempotent row of this adapter fails before it is sent; lengthen the provider's window (for nats: the stream's duplicate window, Duplicates) beyond it",
			"key_ttl", ttl, "margin", config.KeyTTLMargin)
	}
}

// located splits an adapter's error into one line per problem, each
// located at the adapter's name in the config file.
func located(cfg *config.Config, name string, err error) []error {
	parts := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts = j.Unwrap()
	}
	out := make([]error, len(parts))
	for i, e := range parts {
		out[i] = fmt.Errorf("%s:%d: adapters.%s: %w", cfg.Path, cfg.Adapters[name].Line, name, e)
	}
	return out
}

func closeAdapter(a dispatch.Adapter) {
	r, _ := dispatch.NewRegistry(&dispatch.Entry{Name: "x", Adapter: a})
	_ = r.Close(context.Background())
}
