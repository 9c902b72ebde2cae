package mcp

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
	"github.com/drainer-io/drainer/outbox"
)

// The mcp adapter's config keys and their rules (docs/reference.md §4),
// and its registration as adapter type mcp.

// DefaultKeyTTL is the mcp adapter's key_ttl when the config leaves it unset.
const DefaultKeyTTL = 24 * time.Hour

// reservedHeaders are set by the adapter's transport besides the headers
// every HTTP adapter sets (docs/reference.md §5).
var reservedHeaders = append([]string{"Mcp-Session-Id", "Mcp-Protocol-Version", "Accept"}, wire.SetByDrainer...)

// Settings are the keys of an mcp adapter in the config file.
type Settings struct {
	// URL is the server's one Streamable HTTP endpoint. A query parameter
	// named like a credential must come from a reference.
	URL     string                 `yaml:"url" secret:"query"`
	Headers map[string]wire.Secret `yaml:"headers"`
}

// Check reports every problem of the settings.
func (s *Settings) Check(c *wire.Checker) {
	if c.Require("url", s.URL == "") {
		if err := validateURL(s.URL); err != nil {
			c.Errorf("url", "%v", err)
		}
	}
	wire.CheckHeaders(c, "headers", wire.Reveal(s.Headers), reservedHeaders)
}

// validateURL checks the endpoint. Its errors never quote the URL.
func validateURL(s string) error {
	if strings.Contains(s, "{tool_name}") {
		return errors.New("an MCP server has one endpoint: {tool_name} is not a variable of an mcp url (the tool goes in tools/call)")
	}
	_, err := wire.ParseEndpoint(s)
	return err
}

// configure builds an mcp adapter; its Start checks, against the server's
// tools/list, the routes it serves (as their adapter or their fallback): a
// tool the server lacks is an error naming the tool and the adapter; a
// class that contradicts the tool's annotations is a warning. Only run
// connects; check does not. A server that cannot be reached yet does not
// fail the start: the adapter keeps connecting in the background while its
// rows wait.
func configure(in dispatch.BuildInput) (dispatch.Start, error) {
	s := in.Settings.(*Settings)
	c := Config{URL: s.URL, Headers: wire.Reveal(s.Headers), Timeout: in.Timeout, Logger: in.Logger,
		ClientVersion: in.Version, UserAgent: in.UserAgent()}
	if err := c.WithDefaults().Validate(); err != nil {
		return nil, err
	}
	routes := make([]Route, 0, len(in.Routes))
	for _, r := range in.Routes {
		routes = append(routes, Route{Tool: r.Tool, Class: cmp.Or(r.Class, outbox.ClassKeyIdempotent)})
	}
	// Unreachable (yet): its rows wait, no attempt consumed, until it
	// answers and tools/list is read.
	return dispatch.StartProbed(in.Logger,
		"mcp: server unreachable at startup; the other adapters drain, this one connects in the background",
		func() (*Adapter, error) { return New(c) },
		func(ctx context.Context, ad *Adapter) error { return ad.CheckRoutes(ctx, in.Name, routes, in.Logger) },
		func(ad *Adapter) { ad.StartInBackground(in.Name, routes, in.Logger) }), nil
}

func init() {
	dispatch.RegisterKind(dispatch.Kind{
		Type:          "mcp",
		DefaultKeyTTL: DefaultKeyTTL,
		NewSettings:   func() dispatch.Settings { return new(Settings) },
		Configure:     configure,
	})
}
