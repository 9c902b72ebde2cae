package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/drainer-io/drainer/dispatch/wire"
)

// Settings are an adapter type's own config keys: the adapter's package
// defines the struct (with yaml tags), the config loader decodes the
// adapter's section into it, and Check is the one place its rules live,
// for `drainer check` and `drainer run` alike.
type Settings interface {
	// Check reports every problem of the settings into c, each located by
	// its field path (url, headers.Host, brokers[0]). c.Src tells how the
	// fields were written; a field whose value is not known (c.Known) is
	// not checked further.
	Check(c *wire.Checker)
}

// RouteSpec is what an adapter learns of a route it serves.
type RouteSpec struct {
	Tool string
	// Class is the route's class, its default applied.
	Class string
	// Fallback is set when the adapter serves the route as its fallback.
	Fallback bool
	// The request keys of an http route (Kind.RouteKeys): method, path,
	// fixed query, body mode and the key's placement (nil: the adapter's).
	Method         string
	Path           string
	Query          map[string]string
	Body           string
	IdempotencyKey *wire.KeyPlacement
	// Undoes lists the tools whose routes name this one as their
	// compensation: rows of this tool then carry a compensation's payload
	// (forward_key, forward_payload, forward_response; docs/sagas.md), and
	// a request built from other fields could never be sent.
	Undoes []string
}

// Start connects a configured adapter (to its database, brokers, server
// or plugin process) and returns it ready to dispatch.
type Start func(ctx context.Context) (Adapter, error)

// StartWith is the Start of an adapter built by newAdapter: its error is
// returned as is, and a failed build never yields a typed nil Adapter.
func StartWith[A Adapter](newAdapter func(context.Context) (A, error)) Start {
	return func(ctx context.Context) (Adapter, error) {
		a, err := newAdapter(ctx)
		if err != nil {
			return nil, err
		}
		return a, nil
	}
}

// BuildInput is what an adapter is built from: its settings and the
// config's envelope of it.
type BuildInput struct {
	Name     string
	Settings Settings
	// Timeout bounds one attempt (the default applied).
	Timeout time.Duration
	// MaxConcurrency is the adapter's max_concurrency; 0 when unset.
	MaxConcurrency int
	// KeyTTL is the configured key_ttl; 0 when unset.
	KeyTTL time.Duration
	// Routes are the routes the adapter serves, as adapter or fallback.
	Routes  []RouteSpec
	Logger  *slog.Logger
	Version string
}

// UserAgent is the User-Agent of drainer's HTTP requests, "" when the
// version is unknown (the adapter's default then applies).
func (in BuildInput) UserAgent() string {
	if in.Version == "" {
		return ""
	}
	return "drainer/" + in.Version
}

// Kind is one adapter type (the type key of an adapter): how its settings
// are decoded and checked, and how it is built. Each adapter package
// registers its Kind; `drainer check` and `drainer run` both read this one
// table.
type Kind struct {
	// Type is the config's type value (http, stripe, …).
	Type string
	// DefaultKeyTTL is the provider's idempotency window when key_ttl is
	// unset and the adapter does not report one (0: unlimited).
	DefaultKeyTTL time.Duration
	// NewSettings returns empty settings, a pointer to the adapter
	// package's struct.
	NewSettings func() Settings
	// RouteKeys are the route keys only routes of this type accept.
	RouteKeys []string
	// CheckRoute, when set, checks a route the adapter (named adapter, with
	// settings s) serves; paths are relative to the route.
	CheckRoute func(c *wire.Checker, adapter string, s Settings, r RouteSpec)
	// Configure turns the settings into the adapter's runtime config and
	// validates it, without connecting anywhere; the Start it returns
	// connects.
	Configure func(in BuildInput) (Start, error)
}

var kinds struct {
	sync.RWMutex
	m map[string]Kind
}

// RegisterKind adds an adapter type; adapter packages call it from init.
// It panics on a duplicate or incomplete Kind (a programming error).
func RegisterKind(k Kind) {
	if k.Type == "" || k.NewSettings == nil || k.Configure == nil {
		panic("dispatch: incomplete adapter kind " + k.Type)
	}
	if t := reflect.TypeOf(k.NewSettings()); t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("dispatch: settings of adapter kind %s must be a pointer to a struct, got %s", k.Type, t))
	}
	kinds.Lock()
	defer kinds.Unlock()
	if _, dup := kinds.m[k.Type]; dup {
		panic("dispatch: adapter kind " + k.Type + " registered twice")
	}
	if kinds.m == nil {
		kinds.m = make(map[string]Kind)
	}
	kinds.m[k.Type] = k
}

// KindOf returns the registered adapter type t.
func KindOf(t string) (Kind, bool) {
	kinds.RLock()
	defer kinds.RUnlock()
	k, ok := kinds.m[t]
	return k, ok
}

// KindTypes returns the registered adapter types, sorted.
func KindTypes() []string {
	kinds.RLock()
	defer kinds.RUnlock()
	types := make([]string, 0, len(kinds.m))
	for t := range kinds.m {
		types = append(types, t)
	}
	slices.Sort(types)
	return types
}

// Validate checks settings set in Go (no config file), for an adapter's
// New: the same rules as the config file's.
func Validate(s Settings) error {
	c := wire.NewChecker(nil)
	s.Check(c)
	return c.Errs.Err()
}
