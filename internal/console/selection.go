package console

import (
	"context"
	"encoding/json"
	"github.com/drainer-io/drainer/outbox"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/drainer-io/drainer/ops"
)

// viewParams are the query parameters that choose a view's rows: every
// filter and the search box. after and limit only page through them.
var viewParams = []string{"status", "tool", "run", "scope", "older_than", "payload", "search"}

// selection is the rows a rows view holds: every filter of its query and
// its search box, read once. The list, a bulk action's dry run and the
// action itself all take their rows from it, so they cannot disagree.
type selection struct {
	// filter is the view's filter with the search folded in (its AfterSeq
	// is 0: a view is all its pages).
	filter ops.Filter
	// params are the view's parameters as given (viewParams, trimmed).
	params url.Values
	// matched says how the search was read: key, agent_run_id or
	// business_scope ("" without a search).
	matched string
	// empty: the search contradicts a filter (a run id searched in a view
	// of another run), so the view holds no row.
	empty bool
}

// selectionOf reads the view of query or form values v. The search is read
// as a key when a row has that key, else as an agent_run_id when a row
// has that run, else as a business_scope, and it narrows the filters: the
// view holds the rows matching every filter and the search.
func (s *Server) selectionOf(ctx context.Context, d *db, v url.Values) (*selection, error) {
	sel, err := newSelection(v)
	if err != nil || sel.params.Get("search") == "" {
		return sel, err
	}
	matched, err := searchMatch(ctx, d, sel.params.Get("search"))
	if err != nil {
		return nil, err
	}
	sel.narrow(matched)
	return sel, nil
}

// newSelection reads the view's filters and parameters of v, its search
// not yet read.
func newSelection(v url.Values) (*selection, error) {
	f, err := filterOf(v)
	if err != nil {
		return nil, err
	}
	sel := &selection{filter: f, params: url.Values{}}
	for _, k := range viewParams {
		if x := strings.TrimSpace(v.Get(k)); x != "" {
			sel.params.Set(k, x)
		}
	}
	return sel, nil
}

// searchOrder are the ways a search is read, first the one preferred.
var searchOrder = []string{"key", "agent_run_id", "business_scope"}

// searchMatch says how d reads the search q: key when a row has that key,
// else agent_run_id when a row has that run, else business_scope.
func searchMatch(ctx context.Context, d *db, q string) (string, error) {
	status, err := d.Store.RowStatus(ctx, d.DB, q)
	if err != nil || status != "" {
		return "key", err
	}
	runRows, err := d.Store.RunRows(ctx, d.DB, q, 1)
	if err != nil || len(runRows) > 0 {
		return "agent_run_id", err
	}
	return "business_scope", nil
}

// narrow folds the search, read as matched, into the view's filters.
func (sel *selection) narrow(matched string) {
	q := sel.params.Get("search")
	field := &sel.filter.Scope
	switch matched {
	case "key":
		sel.matched, sel.filter.Keys = matched, []string{q}
		return
	case "agent_run_id":
		field = &sel.filter.Run
	}
	sel.matched = matched
	if *field != "" && *field != q {
		sel.empty = true
	}
	*field = q
}

// filterOf reads a view's filters (not its search) from query or form
// values.
func filterOf(v url.Values) (ops.Filter, error) {
	f := ops.Filter{Status: outbox.Status(v.Get("status")), Tool: v.Get("tool"), Run: v.Get("run"), Scope: v.Get("scope")}
	for _, name := range viewParams {
		if len(v.Get(name)) > maxFilterLen {
			return f, badRequest("%s: longer than %d bytes", name, maxFilterLen)
		}
	}
	if f.Status != "" {
		if err := ops.ValidateStatus(f.Status); err != nil {
			return f, badRequest("status: %v", err)
		}
	}
	if a := v.Get("older_than"); a != "" {
		d, err := time.ParseDuration(a)
		if err != nil || d < 0 {
			return f, badRequest("older_than: %q is not a duration such as 90s, 15m or 2h", a)
		}
		f.OlderThan = d
	}
	if p := strings.TrimSpace(v.Get("payload")); p != "" {
		var obj map[string]any
		if err := json.Unmarshal([]byte(p), &obj); err != nil {
			return f, badRequest(`payload: not a JSON object such as {"customer":"c1"}: %v`, err)
		}
		f.Payload = json.RawMessage(p)
	}
	return f, nil
}

// keys returns the keys of the view's first limit rows in seq order.
func (sel *selection) keys(ctx context.Context, d *db, limit int) ([]string, error) {
	if sel.empty {
		return []string{}, nil
	}
	return d.Store.ViewKeys(ctx, d.DB, sel.filter.StoreFilter(), limit)
}

// String describes the view for the log: its parameters, the payload
// filter's value left out (it holds payload data).
func (sel *selection) String() string {
	var parts []string
	for _, k := range viewParams {
		x := sel.params.Get(k)
		switch {
		case x == "":
			continue
		case k == "payload":
			x = "…"
		case k == "search" && sel.matched != "":
			x += " (" + sel.matched + ")"
		}
		parts = append(parts, k+"="+x)
	}
	if len(parts) == 0 {
		return "every row"
	}
	return strings.Join(slices.Clip(parts), " ")
}
