package builtin

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/mcp"
	"github.com/drainer-io/drainer/outbox"
)

// buildMCP builds an mcp adapter and checks, against the server's tools/list,
// the routes it serves (as their adapter or their fallback): a tool the server
// lacks is an error naming the tool and the adapter; a class that contradicts
// the tool's annotations is a warning. Only run and Build connect; check does
// not. A server that cannot be reached yet does not fail the build: the
// adapter keeps connecting in the background while its rows wait.
func buildMCP(ctx context.Context, cfg *config.Config, name string, a *config.Adapter, timeout time.Duration, opts Options) (dispatch.Adapter, error) {
	headers := make(map[string]string, len(a.Headers))
	for k, v := range a.Headers {
		headers[k] = v.Reveal()
	}
	c := mcp.Config{URL: a.URL, Headers: headers, Timeout: timeout, Logger: opts.Logger, ClientVersion: opts.Version}
	if opts.Version != "" {
		c.UserAgent = "drainer/" + opts.Version
	}
	ad, err := mcp.New(c)
	if err != nil {
		return nil, err
	}
	var routes []mcp.Route
	if cfg != nil {
		for tool, r := range cfg.Routes {
			if r.Adapter == name || r.Fallback == name {
				routes = append(routes, mcp.Route{Tool: tool, Class: cmp.Or(r.Class, outbox.ClassKeyIdempotent)})
			}
		}
	}
	err = ad.CheckRoutes(ctx, name, routes, opts.Logger)
	if errors.Is(err, dispatch.ErrUnavailable) {
		// Unreachable (yet): never hold the other adapters. Its rows wait,
		// no attempt consumed, until it answers and tools/list is read.
		if opts.Logger != nil {
			opts.Logger.Warn("mcp: server unreachable at startup; the other adapters drain, this one connects in the background", "err", err)
		}
		ad.StartInBackground(name, routes, opts.Logger)
		return ad, nil
	}
	if err != nil {
		_ = ad.Close(context.Background())
		return nil, err
	}
	return ad, nil
}
