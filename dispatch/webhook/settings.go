package webhook

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
)

// The http adapter's config keys and their rules (docs/reference.md §4),
// and its registration as adapter type http.

// DefaultKeyTTL is the http adapter's key_ttl when the config leaves it
// unset: the usual provider idempotency window.
const DefaultKeyTTL = 24 * time.Hour

// Settings are the keys of an http adapter in the config file.
type Settings struct {
	// URL is the target; {tool_name}, path-escaped, is its only variable. A
	// query parameter named like a credential must come from a reference.
	URL     string                 `yaml:"url" secret:"query"`
	Headers map[string]wire.Secret `yaml:"headers"`
	// IdempotencyKey is where the key travels; nil means header
	// Idempotency-Key.
	IdempotencyKey *KeyPlacement `yaml:"idempotency_key"`
}

// Check reports every problem of the settings.
func (s *Settings) Check(c *wire.Checker) {
	if c.Require("url", s.URL == "") {
		checkURL(c, "url", s.URL)
	}
	headers := wire.Reveal(s.Headers)
	wire.CheckHeaders(c, "headers", headers, wire.SetByDrainer)
	if s.IdempotencyKey != nil {
		checkPlacement(c, "idempotency_key", *s.IdempotencyKey, s.URL, headers)
	}
}

// settings are the config keys of a runtime config.
func (c Config) settings() *Settings {
	s := &Settings{URL: c.URL, Headers: wire.Hide(c.Headers)}
	if !c.KeyPlacement.IsZero() {
		s.IdempotencyKey = &c.KeyPlacement
	}
	return s
}

// checkURL checks the URL template at path: {tool_name} is its only
// variable (looked for in the text as written, so a message never shows
// part of an expanded value), in the path or the query of an absolute http
// or https URL.
func checkURL(c *wire.Checker, path, tmpl string) {
	for _, v := range wire.TemplateVars(wire.Literal(c.Raw(path, tmpl))) {
		if v != toolNameVar {
			c.Errorf(path, "unknown URL variable %s; {tool_name} is the only one", v)
			return
		}
	}
	if err := validateURL(tmpl); err != nil {
		c.Errorf(path, "%v", err)
	}
}

// validateURL checks the URL template. Its errors never quote the URL.
func validateURL(tmpl string) error {
	if strings.ContainsAny(strings.ReplaceAll(tmpl, toolNameVar, ""), "{}") {
		return errors.New("unbalanced { or } in the URL; {tool_name} is the only variable")
	}
	const marker = "drainer-tool-name"
	u, err := wire.ParseEndpoint(strings.ReplaceAll(tmpl, toolNameVar, marker))
	if err != nil {
		return err
	}
	if strings.Contains(u.Host, marker) {
		return errors.New("{tool_name} may appear only in the URL's path or query")
	}
	return nil
}

// routeKeys are the route keys of an http route (docs/reference.md §4).
var routeKeys = []string{"method", "path", "query", "body", "idempotency_key"}

// checkConfiguredRoute checks the request keys of a route the adapter
// serves as its adapter: its idempotency_key, method, path, query and body.
func checkConfiguredRoute(c *wire.Checker, adapter string, ds dispatch.Settings, r dispatch.RouteSpec) {
	s := ds.(*Settings)
	if r.Fallback {
		return
	}
	place := KeyPlacement{}
	if s.IdempotencyKey != nil {
		place = *s.IdempotencyKey
	}
	if r.IdempotencyKey != nil {
		checkPlacement(c, "idempotency_key", *r.IdempotencyKey, s.URL, wire.Reveal(s.Headers))
		place = *r.IdempotencyKey
	}
	checkRoute(c, "", Route{Method: r.Method, Path: r.Path, Query: r.Query, Body: r.Body}, place.WithDefaults())
	checkCompensationPath(c, r)
	if r.Path != "" && strings.Contains(s.URL, toolNameVar) {
		// The mistake of a config written for POST url/{tool_name} that
		// then gains imported paths.
		c.Warnf("path", "the path is appended to adapters.%s.url, which holds {tool_name}: requests go to .../{tool_name}%s; make that url the API's base", adapter, r.Path)
	}
}

// configure turns an http adapter's settings into its runtime config: each
// route's key placement, method, path, query and body become the tool's own.
func configure(in dispatch.BuildInput) (dispatch.Start, error) {
	s := in.Settings.(*Settings)
	cfg := Config{URL: s.URL, Headers: wire.Reveal(s.Headers), Timeout: in.Timeout, UserAgent: in.UserAgent()}
	if s.IdempotencyKey != nil {
		cfg.KeyPlacement = *s.IdempotencyKey
	}
	for _, r := range in.Routes {
		if r.Fallback {
			continue
		}
		if r.IdempotencyKey != nil {
			if cfg.ToolKeyPlacement == nil {
				cfg.ToolKeyPlacement = map[string]KeyPlacement{}
			}
			cfg.ToolKeyPlacement[r.Tool] = *r.IdempotencyKey
		}
		if r.Method != "" || r.Path != "" || len(r.Query) > 0 || r.Body != "" {
			if cfg.Routes == nil {
				cfg.Routes = map[string]Route{}
			}
			cfg.Routes[r.Tool] = Route{Method: r.Method, Path: r.Path, Query: r.Query, Body: r.Body}
		}
	}
	if err := cfg.WithDefaults().Validate(); err != nil {
		return nil, err
	}
	return dispatch.StartWith(func(context.Context) (*Adapter, error) { return New(cfg) }), nil
}

func init() {
	dispatch.RegisterKind(dispatch.Kind{
		Type:          "http",
		DefaultKeyTTL: DefaultKeyTTL,
		NewSettings:   func() dispatch.Settings { return new(Settings) },
		RouteKeys:     routeKeys,
		CheckRoute:    checkConfiguredRoute,
		Configure:     configure,
	})
}

// compensationField reports a field of a compensation row's payload a path
// can read: forward_key, or a field of forward_payload or forward_response
// ({forward_response.id}: the resource the forward call made).
func compensationField(f string) bool {
	return f == "forward_key" || strings.HasPrefix(f, "forward_payload.") || strings.HasPrefix(f, "forward_response.")
}

// checkCompensationPath refuses the path of a route that undoes others
// (dispatch.RouteSpec.Undoes) when it reads a field a compensation's
// payload does not have as a string: every compensation would fail unsent,
// and a saga would halt when a run is aborted, long after the config was
// accepted.
func checkCompensationPath(c *wire.Checker, r dispatch.RouteSpec) {
	if len(r.Undoes) == 0 || r.Path == "" || !c.Known("path") {
		return
	}
	t, err := ParsePath(r.Path)
	if err != nil {
		return // reported by checkRoute
	}
	for _, f := range t.Fields() {
		if !compensationField(f) {
			c.Errorf("path", "{%s} cannot be filled: this route undoes %s (their compensation), and a compensation's payload holds forward_key, forward_payload and forward_response, so a path reads {forward_key}, {tool_name} or a field of the other two ({forward_response.%s}, {forward_payload.%s}); every compensation would fail unsent",
				f, strings.Join(r.Undoes, ", "), f, f)
		}
	}
}
