package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"

	"github.com/drainer-io/drainer/dispatch"
)

// Tool is one entry of tools/list, with the annotations the startup check reads.
type Tool struct {
	Name        string       `json:"name"`
	Annotations *Annotations `json:"annotations"`
	// Definition is the whole entry as the server listed it (description,
	// schemas, annotations), which the gateway lists again.
	Definition json.RawMessage `json:"-"`
}

// Annotations are a tool's behaviour hints; nil means not given (MCP defaults:
// readOnly false, destructive true, idempotent false).
type Annotations struct {
	ReadOnlyHint    *bool `json:"readOnlyHint"`
	DestructiveHint *bool `json:"destructiveHint"`
	IdempotentHint  *bool `json:"idempotentHint"`
}

// Route is what the startup check needs of a configured route.
type Route struct {
	Tool  string
	Class string // naturally_idempotent | key_idempotent | non_idempotent
}

// ListTools reads every page of tools/list, negotiating first.
func (a *Adapter) ListTools(ctx context.Context) ([]Tool, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	if err := a.Init(ctx); err != nil {
		return nil, err
	}
	var tools []Tool
	cursor := ""
	for page := 0; page < 1000; page++ {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		msg, _, _, r, ok := a.request(ctx, "tools/list", params, nil, "", "", nil)
		if !ok {
			r.Err = fmt.Errorf("mcp tools/list: %w", r.Err)
			if r.Reason == ReasonInit || r.Reason == ReasonSessionExpired {
				r.Reason = dispatch.ReasonConnection // a server that went away between the calls
			}
			return nil, startupError(r)
		}
		if msg.Error != nil {
			return nil, fmt.Errorf("mcp tools/list: %w", msg.Error)
		}
		var res struct {
			Tools      []json.RawMessage `json:"tools"`
			NextCursor string            `json:"nextCursor"`
		}
		if err := json.Unmarshal(msg.Result, &res); err != nil {
			return nil, errors.New("mcp tools/list: the result is not a tool list")
		}
		for _, raw := range res.Tools {
			var t Tool
			if err := json.Unmarshal(raw, &t); err != nil {
				return nil, errors.New("mcp tools/list: an entry is not a tool")
			}
			t.Definition = raw
			tools = append(tools, t)
		}
		if res.NextCursor == "" {
			return tools, nil
		}
		cursor = res.NextCursor
	}
	return nil, errors.New("mcp tools/list: more than 1000 pages")
}

// CheckRoutes reads tools/list and checks the routes served by adapter name:
// a tool the server lacks is an error (all of them at once, each naming the
// tool and the adapter); a class that contradicts the tool's annotations is
// logged as a warning naming both.
func (a *Adapter) CheckRoutes(ctx context.Context, name string, routes []Route, log *slog.Logger) error {
	missing, err := a.checkRoutes(ctx, name, routes, log)
	if err != nil {
		return err
	}
	tools := slices.Sorted(maps.Keys(missing))
	errs := make([]error, 0, len(tools))
	for _, t := range tools {
		errs = append(errs, missing[t])
	}
	return errors.Join(errs...)
}

// checkRoutes is CheckRoutes, returning the missing tools apart: err is a
// failure to read tools/list.
func (a *Adapter) checkRoutes(ctx context.Context, name string, routes []Route, log *slog.Logger) (map[string]error, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tools, err := a.ListTools(ctx)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]Tool, len(tools))
	for _, t := range tools {
		byName[t.Name] = t
	}
	routes = slices.Clone(routes)
	sort.Slice(routes, func(i, j int) bool { return routes[i].Tool < routes[j].Tool })
	missing := map[string]error{}
	for _, r := range routes {
		t, ok := byName[r.Tool]
		if !ok {
			missing[r.Tool] = fmt.Errorf("route %s: the MCP server of adapter %s has no tool %q", r.Tool, name, r.Tool)
			continue
		}
		if why := Contradiction(r.Class, t.Annotations); why != "" {
			log.Warn("route class contradicts the tool's annotations", // log names the adapter
				"route", r.Tool, "class", r.Class, "tool", t.Name, "annotations", why)
		}
	}
	return missing, nil
}

// Contradiction returns why class contradicts the annotations, or "" when it
// does not:
//   - naturally_idempotent on a tool that is neither read-only nor idempotent
//     (a tool that gives no annotations has MCP's defaults: not read-only,
//     not idempotent, destructive);
//   - non_idempotent on a tool that says it is read-only or idempotent;
//   - naturally_idempotent on a destructive, non-idempotent tool.
func Contradiction(class string, an *Annotations) string {
	if an == nil {
		if class == "naturally_idempotent" {
			return "no annotations (MCP's defaults: readOnlyHint false, idempotentHint false, destructiveHint true)"
		}
		return ""
	}
	readOnly := an.ReadOnlyHint != nil && *an.ReadOnlyHint
	idempotent := an.IdempotentHint != nil && *an.IdempotentHint
	destructive := an.DestructiveHint == nil || *an.DestructiveHint
	switch class {
	case "naturally_idempotent":
		if !readOnly && !idempotent {
			if destructive {
				return "destructiveHint true and idempotentHint false"
			}
			return "readOnlyHint false and idempotentHint false"
		}
	case "non_idempotent":
		if readOnly {
			return "readOnlyHint true"
		}
		if idempotent {
			return "idempotentHint true"
		}
	}
	return ""
}
