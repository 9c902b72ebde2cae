package console

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/drainer-io/drainer/ops"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
)

// What a fleet's console reads of every database's rows when a request
// names no database: a key where it is (fleetRow), a view's rows merged
// (fleetRows), never the first database's alone.

const (
	// maxCursorLen bounds a cursor= (a position per database).
	maxCursorLen = 48 << 10
	// maxParkedShown bounds the parked rows of each status a page shows.
	maxParkedShown = 200
)

// fleetRow reads the row of key in the database holding it, with no
// database named. A key in several is a 409 naming them (databases); in
// none a 404 saying every database was searched, or a 503 naming those
// that could not be read. Found in one while another could not be read,
// it is answered with Unread naming those (the key may be there too).
func (s *Server) fleetRow(ctx context.Context, key string) (*RowDetail, error) {
	names, in, unread := s.keyHolders(ctx, key, true)
	if err := oneHolder("key "+key, "row with key "+key, names, in, unread); err != nil {
		return nil, err
	}
	d, err := s.databaseNamed(in[0])
	if err != nil {
		return nil, err
	}
	row, err := s.row(ctx, d, key)
	if err != nil {
		return nil, err
	}
	row.Database, row.Unread = d.Name, unreadWhy(unread, ": %s")
	return row, nil
}

// fleetRows reads one page of the view of v over every database of a
// fleet (none named), and the view. Each database reads at most limit+1
// rows of its view after its own position in the cursor (keyset on its
// seq, as one database's pages); the page merges them oldest first
// (created_at, each database's rows kept in seq order) and holds the first
// limit, each naming its database. The next cursor holds each database's
// position after the rows shown, so no row is skipped or shown twice. A
// database that cannot be read is named in Unread (its position kept), the
// others shown.
func (s *Server) fleetRows(ctx context.Context, v url.Values) (*RowsPage, *selection, error) {
	limit, err := pageLimit(v)
	if err != nil {
		return nil, nil, err
	}
	if v.Get("after") != "" {
		return nil, nil, badRequest("after: a seq is one database's; every database's pages go on with cursor (next_cursor)")
	}
	pos, err := readCursor(v.Get("cursor"))
	if err != nil {
		return nil, nil, err
	}
	sel, unread, err := s.fleetSelection(ctx, v)
	if err != nil {
		return nil, nil, err
	}
	out := &RowsPage{Rows: []RowView{}, Matched: sel.matched}
	if sel.empty {
		out.Unread = unreadWhy(unread, ": %s")
		return out, sel, nil
	}
	if err := sel.filter.Validate(); err != nil {
		return nil, nil, badRequest("%v", err)
	}
	names := s.readable(unread)
	got := make([][]store.RowSummary, len(names))
	errs := s.eachDatabase(ctx, names, func(ctx context.Context, i int, d *db) error {
		var err error
		got[i], err = d.Store.ListRowSummaries(ctx, d.DB, sel.filter.StoreFilter(), pos[names[i]], limit+1)
		return err
	})
	for i, name := range names {
		if errs[i] != nil {
			unread, got[i] = append(unread, unreadDB{name, s.unreadWhy(name, errs[i])}), nil
		}
	}
	out.Unread = unreadWhy(unread, ": %s")
	if merge(out, names, got, pos, limit) {
		out.NextCursor = writeCursor(pos)
	}
	return out, sel, nil
}

// readable lists the databases shown but those of unread.
func (s *Server) readable(unread []unreadDB) []string {
	return slices.DeleteFunc(s.names(), func(n string) bool {
		return slices.ContainsFunc(unread, func(u unreadDB) bool { return u.name == n })
	})
}

// merge appends to page the first limit rows of got (names[i]'s rows, in
// seq order), oldest first: always the oldest of each database's first
// row not yet taken, so each database's rows shown are a prefix of its
// own. pos then holds each database's last seq shown; merge says whether
// a row was left (the page is not the last).
func merge(page *RowsPage, names []string, got [][]store.RowSummary, pos map[string]int64, limit int) bool {
	next := make([]int, len(got))
	for len(page.Rows) < limit {
		best := -1
		for i := range got {
			if next[i] < len(got[i]) && (best < 0 || got[i][next[i]].CreatedAt.Before(got[best][next[best]].CreatedAt)) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		r := got[best][next[best]]
		next[best]++
		row := viewOf(r)
		row.Database = names[best]
		page.Rows = append(page.Rows, row)
		pos[names[best]] = r.Seq
	}
	for i := range got {
		if next[i] < len(got[i]) {
			return true
		}
	}
	return false
}

// fleetSelection reads the view of v for every database: its search is
// read the same way in all (as a key when a database holds that key, else
// a run id when one holds that run, else a scope), so that each database
// holds the same view. The databases that could not be read are returned.
func (s *Server) fleetSelection(ctx context.Context, v url.Values) (*selection, []unreadDB, error) {
	sel, err := newSelection(v)
	if err != nil {
		return nil, nil, err
	}
	q := sel.params.Get("search")
	if q == "" {
		return sel, nil, nil
	}
	names := s.names()
	matched := make([]string, len(names))
	errs := s.eachDatabase(ctx, names, func(ctx context.Context, i int, d *db) error {
		var err error
		matched[i], err = searchMatch(ctx, d, q)
		return err
	})
	var unread []unreadDB
	best := len(searchOrder) - 1
	for i, name := range names {
		if errs[i] != nil {
			unread = append(unread, unreadDB{name, s.unreadWhy(name, errs[i])})
		} else if at := slices.Index(searchOrder, matched[i]); at < best {
			best = at
		}
	}
	sel.narrow(searchOrder[best])
	return sel, unread, nil
}

// readCursor reads a cursor= of next_cursor: each database's position
// (the last seq shown), none at first.
func readCursor(c string) (map[string]int64, error) {
	pos := map[string]int64{}
	if c == "" {
		return pos, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(c) > maxCursorLen || json.Unmarshal(b, &pos) != nil {
		return nil, badRequest("cursor: not a next_cursor of this console")
	}
	for _, seq := range pos {
		if seq < 0 {
			return nil, badRequest("cursor: not a next_cursor of this console")
		}
	}
	return pos, nil
}

// writeCursor is the cursor of positions pos (a database at 0 left out).
func writeCursor(pos map[string]int64) string {
	maps.DeleteFunc(pos, func(_ string, seq int64) bool { return seq == 0 })
	b, _ := json.Marshal(pos)
	return base64.RawURLEncoding.EncodeToString(b)
}

// fleetRowsPage is the rows page of every database of a fleet (none
// named): their rows merged (fleetRows), each naming its database; a
// search for a key one database holds goes to its row page there.
func (s *Server) fleetRowsPage(ctx context.Context, q url.Values, p *pageData) (string, error) {
	rows, sel, err := s.fleetRows(ctx, q)
	if err != nil {
		return "", err
	}
	p.AllDatabases, p.Unread = true, rows.Unread
	if sel.matched == "key" && q.Get("cursor") == "" && len(rows.Rows) == 1 {
		d, err := s.databaseNamed(rows.Rows[0].Database)
		if err != nil {
			return "", err
		}
		p.Title, p.Nav, p.Database, p.AllDatabases = "Row", "rows", d.Name, false
		p.Row, err = s.row(ctx, d, rows.Rows[0].Key)
		return "row", err
	}
	st := s.stats.snapshot()
	p.Title, p.Nav, p.Rows, p.Query, p.Statuses = "Rows", "rows", rows, q, outbox.StatusStrings(outbox.Statuses...)
	p.Tools = toolsOf(st)
	return "rows", nil
}

// fleetRowPage is the page of a row with no database named: in the
// database holding it (fleetRow); a key in several lists each one's row,
// naming its database.
func (s *Server) fleetRowPage(ctx context.Context, key string, p *pageData) (string, error) {
	row, err := s.fleetRow(ctx, key)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusConflict && ae.Databases != nil {
		return s.fleetRowsPage(ctx, url.Values{"search": {key}}, p)
	}
	if err != nil {
		return "", err
	}
	p.Title, p.Nav, p.Row, p.Database, p.Unread = "Row", "rows", row, row.Database, row.Unread
	return "row", nil
}

// fleetParked lists the parked rows of every database of a fleet (none
// named), each naming its database: at most maxParkedShown of each
// status, the oldest first (fleetRows).
func (s *Server) fleetParked(ctx context.Context, p *pageData) error {
	p.AllDatabases = true
	for _, st := range []outbox.Status{outbox.StatusOutcomeUnknown, outbox.StatusCompensationFailed} {
		page, _, err := s.fleetRows(ctx, url.Values{"status": {string(st)}, "limit": {strconv.Itoa(maxParkedShown)}})
		if err != nil {
			return err
		}
		p.Parked = append(p.Parked, page.Rows...)
		p.ParkedMore = p.ParkedMore || page.NextCursor != ""
		for _, u := range page.Unread {
			if !slices.Contains(p.Unread, u) {
				p.Unread = append(p.Unread, u)
			}
		}
	}
	return nil
}

// fleetRun reads run id in the database holding it, with no database
// named (a run's rows live in one database, its tenant's): each database
// reads the run as one database's page does (bounded: ops.MaxRunRows rows
// and the saga). A run in several is a 409 naming them; in none a 404
// saying every database was searched, or a 503 naming those that could not
// be read; found in one while another could not be read, it is answered
// with Unread naming those.
func (s *Server) fleetRun(ctx context.Context, id string) (*RunDetail, error) {
	names := s.names()
	runs := make([]*RunDetail, len(names))
	errs := s.eachDatabase(ctx, names, func(ctx context.Context, i int, d *db) error {
		run, err := s.run(ctx, d, id)
		var nf *ops.NotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		runs[i] = run
		return err
	})
	var in []string
	var unread []unreadDB
	var found *RunDetail
	for i, name := range names {
		switch {
		case errs[i] != nil:
			unread = append(unread, unreadDB{name, s.unreadWhy(name, errs[i])})
		case runs[i] != nil:
			in, found = append(in, name), runs[i]
			found.Database = name
		}
	}
	if err := oneHolder("run "+id, "run with agent_run_id "+id, names, in, unread); err != nil {
		return nil, err
	}
	found.Unread = unreadWhy(unread, ": %s")
	return found, nil
}

// oneHolder is the verdict of a fleet-wide read, no database named, of
// what (a key's row, a run; missing names it when absent) found in the
// databases in, searched in names, unread those that could not be read:
// nil when one holds it (answered there, naming the unread); in several a
// 409 naming them; in none a 503 naming the unread (they may hold it), or
// a 404 saying every database was searched.
func oneHolder(what, missing string, names, in []string, unread []unreadDB) error {
	switch {
	case len(in) > 1:
		return inSeveral(what, in, "read")
	case len(in) == 0 && len(unread) > 0:
		return &apiError{Status: http.StatusServiceUnavailable,
			Msg: "no " + missing + " in the databases read, but " + listNames(unreadWhy(unread, " (%s)")) +
				" could not be read, and may hold it: name the database (database)"}
	case len(in) == 0:
		return inNone(missing, names)
	}
	return nil
}
