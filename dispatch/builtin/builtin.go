package builtin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/kafka"
	"github.com/drainer-io/drainer/dispatch/webhook"
)

// Options carries what adapters need beyond their config.
type Options struct {
	Logger *slog.Logger
	// Version goes into User-Agent headers.
	Version string
}

// DefaultKeyTTL is the provider idempotency window assumed per adapter type
// when the config leaves key_ttl unset (0: unlimited).
var DefaultKeyTTL = map[string]time.Duration{
	"http":     24 * time.Hour,
	"stripe":   24 * time.Hour,
	"postgres": 0,
	"mcp":      24 * time.Hour,
	"kafka":    kafka.DefaultKeyTTL,
}

// Build builds every configured adapter. Errors are joined, each naming the
// adapter and its line in the config file.
func Build(ctx context.Context, cfg *config.Config, opts Options) (*dispatch.Registry, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	names := make([]string, 0, len(cfg.Adapters))
	for name := range cfg.Adapters {
		names = append(names, name)
	}
	sort.Strings(names)
	var entries []*dispatch.Entry
	var errs []error
	for _, name := range names {
		a := cfg.Adapters[name]
		entry, err := build(ctx, cfg, name, a, opts, log.With("adapter", name))
		if err != nil {
			// One line per problem, each located at the adapter.
			for _, e := range unjoin(err) {
				errs = append(errs, fmt.Errorf("%s:%d: adapters.%s: %w", cfg.Path, a.Line, name, e))
			}
			continue
		}
		entries = append(entries, entry)
	}
	if len(errs) > 0 {
		for _, e := range entries {
			closeAdapter(e.Adapter)
		}
		return nil, errors.Join(errs...)
	}
	return dispatch.NewRegistry(entries...)
}

func build(ctx context.Context, cfg *config.Config, name string, a *config.Adapter, opts Options, log *slog.Logger) (*dispatch.Entry, error) {
	timeout := a.Timeout
	if timeout == 0 {
		timeout = config.DefaultAdapterTimeout
	}
	entry := &dispatch.Entry{Name: name, Type: a.Type, Timeout: timeout, KeyTTL: a.KeyTTL}
	opts.Logger = log
	var err error
	switch a.Type {
	case config.TypeHTTP:
		entry.Adapter, err = buildHTTP(cfg, name, a, timeout, opts)
	case config.TypeStripe:
		entry.Adapter, err = buildStripe(ctx, name, a, opts)
	case config.TypePostgres:
		entry.Adapter, err = buildPostgres(ctx, name, a, opts)
	case config.TypeRiver:
		entry.Adapter, err = buildRiver(ctx, name, a, opts)
	case config.TypeNATS:
		entry.Adapter, err = buildNATS(ctx, name, a, opts)
	case config.TypePlugin:
		entry.Adapter, err = buildPlugin(ctx, name, a, opts)
	case config.TypeMCP:
		entry.Adapter, err = buildMCP(ctx, cfg, name, a, timeout, opts)
	case config.TypeKafka:
		entry.Adapter, err = buildKafka(ctx, name, a, timeout, opts)
	default:
		return nil, fmt.Errorf("unknown adapter type %q (valid: %s)", a.Type, strings.Join(config.AdapterTypes(), ", "))
	}
	if err != nil {
		return nil, err
	}
	if entry.KeyTTL == 0 {
		entry.KeyTTL = DefaultKeyTTL[a.Type]
		if t, ok := entry.Adapter.(dispatch.KeyTTLer); ok {
			ttl, err := t.KeyTTL(ctx)
			if err != nil {
				closeAdapter(entry.Adapter)
				return nil, fmt.Errorf("read key_ttl from the provider: %w", err)
			}
			entry.KeyTTL = ttl
		}
	}
	log.Debug("adapter built", "type", a.Type, "timeout", timeout, "key_ttl", entry.KeyTTL)
	return entry, nil
}

// buildHTTP builds an http adapter; the key placement of each route using
// it that sets idempotency_key becomes a per-tool override, and its method,
// path and query the tool's own request.
func buildHTTP(c *config.Config, name string, a *config.Adapter, timeout time.Duration, opts Options) (dispatch.Adapter, error) {
	headers := make(map[string]string, len(a.Headers))
	for k, v := range a.Headers {
		headers[k] = v.Reveal()
	}
	cfg := webhook.Config{URL: a.URL, Headers: headers, Timeout: timeout, KeyPlacement: keyPlacement(a.IdempotencyKey)}
	for tool, r := range c.Routes {
		if r.Adapter == name && r.IdempotencyKey != nil {
			if cfg.ToolKeyPlacement == nil {
				cfg.ToolKeyPlacement = map[string]webhook.KeyPlacement{}
			}
			cfg.ToolKeyPlacement[tool] = keyPlacement(r.IdempotencyKey)
		}
		if r.Adapter == name && (r.Method != "" || r.Path != "" || len(r.Query) > 0) {
			if cfg.Routes == nil {
				cfg.Routes = map[string]webhook.Route{}
			}
			cfg.Routes[tool] = webhook.Route{Method: r.Method, Path: r.Path, Query: r.Query}
		}
	}
	if opts.Version != "" {
		cfg.UserAgent = "drainer/" + opts.Version
	}
	return webhook.New(cfg)
}

// keyPlacement converts a configured idempotency_key (nil: the default).
func keyPlacement(k *config.IdempotencyKey) webhook.KeyPlacement {
	if k == nil {
		return webhook.KeyPlacement{}
	}
	return webhook.KeyPlacement{Name: k.Name, Location: k.Location}
}

// unjoin splits an errors.Join result into its parts.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func closeAdapter(a dispatch.Adapter) {
	r, _ := dispatch.NewRegistry(&dispatch.Entry{Name: "x", Adapter: a})
	_ = r.Close(context.Background())
}
