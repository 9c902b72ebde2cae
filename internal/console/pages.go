package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"maps"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/drainer-io/drainer/ops"
	"github.com/drainer-io/drainer/outbox"
)

// pageData is what every page template receives.
type pageData struct {
	Title string
	Nav   string // the nav entry of the page
	// Actions: the console takes actions; Session: this browser opened a
	// session (CSRF is its form token).
	Actions bool
	Session bool
	Actor   string
	CSRF    string
	// Databases names the databases, shown as a selector when more than one.
	Databases []string
	Database  string
	// Scoped is the database links and forms name (Link, "dbfield"): set
	// when the console shows more than one, so that a page of database B
	// never leads to database A's. Fleet: databases: in the config.
	Scoped string
	Fleet  bool
	// AllDatabases: the page shows every database of a fleet (none named).
	AllDatabases bool
	// Unread names the databases such a page could not read, each with why.
	Unread []string
	// ParkedMore: every database's parked rows are more than shown.
	ParkedMore bool
	// Back is the page an action returns to.
	Back string
	// Self is this page's local URL (path and query).
	Self string

	Error   string
	Refused *ops.TransitionError

	Stats    *Stats
	Rows     *RowsPage
	Query    url.Values
	Statuses []string
	Tools    []string
	Row      *RowDetail
	Run      *RunDetail
	Result   *ActionResult
	Pauses   []Pause
	Parked   []RowView
	Render   time.Duration
	// BulkRequeue and BulkCancel: the rows view may be requeued or
	// cancelled as a whole (the CLI's rules for bulk actions).
	BulkRequeue bool
	BulkCancel  bool
	// View is the rows view's parameters (filters, search, database), the
	// fields of its bulk forms.
	View url.Values
	// MaxBulkRows is the most rows one bulk action takes.
	MaxBulkRows int64
}

// Link is a local URL: path (its dynamic parts escaped by the caller with
// path), the query pairs kv (empty values left out), and the page's
// database when pages name it.
func (p pageData) Link(path string, kv ...string) template.URL {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	if p.Scoped != "" {
		q.Set("database", p.Scoped)
	}
	if len(q) == 0 {
		return template.URL(path)
	}
	return template.URL(path + "?" + q.Encode())
}

// LinkIn is Link in database (a row's, in a list of every database's),
// or in the page's when database is "".
func (p pageData) LinkIn(database, path string, kv ...string) template.URL {
	if database != "" {
		p.Scoped = database
	}
	return p.Link(path, kv...)
}

var funcs = template.FuncMap{
	"add":  func(a, b int64) int64 { return a + b },
	"path": url.PathEscape,
	// query is v with kv set (an empty value deleted), encoded for a
	// link's query: as template.URL, so that its = and & stay such (every
	// key and value is percent-encoded by Encode).
	"query": func(v url.Values, kv ...string) template.URL {
		q := url.Values{}
		for k, x := range v {
			q[k] = slices.Clone(x)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "" {
				q.Del(kv[i])
			} else {
				q.Set(kv[i], kv[i+1])
			}
		}
		return template.URL(q.Encode())
	},
	"when": func(t any) string {
		switch t := t.(type) {
		case time.Time:
			if t.IsZero() {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		case *time.Time:
			if t == nil {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		}
		return "—"
	},
	"ago": func(t time.Time) string { return age(time.Since(t).Seconds()) },
	"age": age,
	"str": func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	},
	"int": func(p *int) string {
		if p == nil {
			return "—"
		}
		return fmt.Sprint(*p)
	},
	"pretty": func(raw json.RawMessage) string {
		if len(raw) == 0 || string(raw) == "null" {
			return "null"
		}
		var b bytes.Buffer
		if json.Indent(&b, raw, "", "  ") != nil {
			return string(raw)
		}
		return b.String()
	},
	"num":  num,
	"rate": func(f float64) string { return fmt.Sprintf("%.1f/s", f) },
	"parked": func(s outbox.Status) bool {
		return s == outbox.StatusOutcomeUnknown || s == outbox.StatusCompensationFailed
	},
	"requeueable": func(s outbox.Status) bool {
		return s == outbox.StatusFailed || s == outbox.StatusPending || s == outbox.StatusCancelled
	},
	"bytes": func(n int) string {
		switch {
		case n >= 1<<20:
			return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
		case n >= 1<<10:
			return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
		}
		return fmt.Sprintf("%d B", n)
	},
	"ms":        func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) },
	"chart":     chart,
	"lastError": describeLastError,
	"busy": func(m map[string]float64) bool {
		for _, v := range m {
			if v > 0 {
				return true
			}
		}
		return false
	},
	"span": span,
}

// age renders seconds as a short age: 42s, 3m10s, 2h05m, 3d4h.
func age(sec float64) string {
	if sec <= 0 {
		return "0s"
	}
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// num renders a count with thousands separators.
func num(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return s
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// pageNames are the page templates; each is rendered inside layout.html.
var pageNames = []string{"overview", "rows", "row", "run", "parked", "pauses", "login", "result", "notfound"}

func parsePages() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "assets/layout.html", path.Join("assets", name+".html"))
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", name, err)
		}
		out[name] = t
	}
	if _, err := fs.Stat(assets, "assets/static/app.js"); err != nil {
		return nil, fmt.Errorf("console assets: %w", err)
	}
	return out, nil
}

// render writes a page. The page is rendered to a buffer first, so a
// failed template never leaves half a page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, p pageData) {
	p.Actions, p.MaxBulkRows = s.cfg.Actions, maxBulkRows
	if sess := s.auth.session(r); sess != nil {
		p.Session, p.Actor, p.CSRF = true, sess.actor, sess.csrf
	}
	p.Databases, p.Fleet = s.names(), s.cfg.Fleet != nil
	if p.Database == "" && !p.Fleet {
		p.Database = s.dbs[0].Name
	}
	if s.scoped() {
		p.Scoped = p.Database
	}
	if p.Self == "" {
		p.Self = r.URL.RequestURI()
	}
	if p.Back == "" {
		p.Back = p.Self
	}
	var b bytes.Buffer
	if err := s.pages[name].Execute(&b, p); err != nil {
		s.log.Error("console: render failed", "page", name, "err", err)
		http.Error(w, "the page could not be rendered; see the daemon's log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// page wraps a page handler of the database a request names (the first
// by default): an error becomes its page (404 not found, 400 bad filter,
// 500 otherwise).
func (s *Server) page(h func(*http.Request, *db, *pageData) (string, error)) http.HandlerFunc {
	return s.pageOf(h, false)
}

// widePage wraps a page handler that, with a fleet and no database named,
// shows every database: it then gets no database (nil).
func (s *Server) widePage(h func(*http.Request, *db, *pageData) (string, error)) http.HandlerFunc {
	return s.pageOf(h, true)
}

func (s *Server) pageOf(h func(*http.Request, *db, *pageData) (string, error), wide bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		p := pageData{}
		var d *db
		var err error
		if !wide || !s.wholeFleet(r) {
			d, err = s.database(r)
		}
		name := ""
		if err == nil {
			if d != nil {
				p.Database = d.Name
			}
			name, err = h(r, d, &p)
		}
		if err != nil {
			ae := classify(err)
			if ae.Status >= 500 {
				s.log.Error("console: page failed", "path", r.URL.Path, "err", err)
			}
			title := "Error"
			if ae.Status == http.StatusNotFound {
				title = "Not found"
			}
			s.render(w, r, ae.Status, "notfound", pageData{Title: title, Error: ae.Msg})
			return
		}
		p.Render = time.Since(start)
		s.render(w, r, http.StatusOK, name, p)
	}
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/api/") {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such API endpoint"})
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	s.render(w, r, http.StatusNotFound, "notfound", pageData{Title: "Not found", Error: "no page at this address"})
}

func (s *Server) overviewPage(r *http.Request, d *db, p *pageData) (string, error) {
	st := s.stats.snapshot()
	if s.cfg.Fleet != nil {
		// The whole fleet unless a database is named.
		p.Database = ""
		if r.URL.Query().Get("database") != "" {
			var err error
			if st, err = s.stats.of(r.Context(), d); err != nil {
				return "", err
			}
			p.Database = d.Name
		} else {
			// No connection for the whole fleet's overview: its pauses,
			// which live in each database, are on the pauses page.
			p.AllDatabases = true
		}
	}
	p.Title, p.Nav, p.Stats, p.Statuses = "Overview", "overview", &st, outbox.StatusStrings(outbox.Statuses...)
	return "overview", nil
}

func (s *Server) rowsPage(r *http.Request, d *db, p *pageData) (string, error) {
	q := r.URL.Query()
	if d == nil {
		return s.fleetRowsPage(r.Context(), q, p)
	}
	sel, err := s.selectionOf(r.Context(), d, q)
	if err != nil {
		return "", err
	}
	rows, err := s.viewPage(r.Context(), d, sel, q)
	if err != nil {
		return "", err
	}
	if sel.matched == "key" && q.Get("after") == "" && len(rows.Rows) == 1 {
		// A key the view holds goes straight to its row page.
		p.Title, p.Nav = "Row", "rows"
		p.Row, err = s.row(r.Context(), d, rows.Rows[0].Key)
		return "row", err
	}
	if s.scoped() && q.Get("database") == "" {
		// The next page and the bulk forms name the database shown.
		q = maps.Clone(q)
		q.Set("database", d.Name)
	}
	st := s.stats.snapshot()
	p.Title, p.Nav, p.Rows, p.Query, p.Statuses = "Rows", "rows", rows, q, outbox.StatusStrings(outbox.Statuses...)
	p.Tools = toolsOf(st)
	p.View = maps.Clone(sel.params)
	if db := q.Get("database"); db != "" {
		p.View.Set("database", db)
	}
	p.BulkRequeue = bulkAllowed(verbRequeue, sel) == nil
	p.BulkCancel = bulkAllowed(verbCancel, sel) == nil
	return "rows", nil
}

// toolsOf lists the tools of the overview's work by tool, each once.
func toolsOf(st Stats) []string {
	var out []string
	seen := map[string]bool{}
	for _, tc := range st.RowsByTool {
		if !seen[tc.Tool] {
			seen[tc.Tool] = true
			out = append(out, tc.Tool)
		}
	}
	return out
}

func (s *Server) rowPage(r *http.Request, d *db, p *pageData) (string, error) {
	if d == nil {
		return s.fleetRowPage(r.Context(), r.PathValue("key"), p)
	}
	row, err := s.row(r.Context(), d, r.PathValue("key"))
	p.Title, p.Nav, p.Row = "Row", "rows", row
	return "row", err
}

// runPage shows a run of the database, or, with a fleet and no database
// named, of the database holding it (fleetRun).
func (s *Server) runPage(r *http.Request, d *db, p *pageData) (string, error) {
	if d == nil {
		run, err := s.fleetRun(r.Context(), r.PathValue("run"))
		if err != nil {
			return "", err
		}
		p.Title, p.Nav, p.Run, p.Database, p.Unread = "Run", "rows", run, run.Database, run.Unread
		return "run", nil
	}
	run, err := s.run(r.Context(), d, r.PathValue("run"))
	p.Title, p.Nav, p.Run = "Run", "rows", run
	return "run", err
}

func (s *Server) parkedPage(r *http.Request, d *db, p *pageData) (string, error) {
	p.Title, p.Nav, p.Parked = "Parked rows", "parked", []RowView{}
	if d == nil {
		return "parked", s.fleetParked(r.Context(), p)
	}
	for _, st := range []outbox.Status{outbox.StatusOutcomeUnknown, outbox.StatusCompensationFailed} {
		page, err := s.rows(r.Context(), d, url.Values{"status": {string(st)}, "limit": {strconv.Itoa(maxParkedShown)}})
		if err != nil {
			return "", err
		}
		p.Parked = append(p.Parked, page.Rows...)
		if page.NextAfter != 0 {
			p.ParkedMore = true
		}
	}
	return "parked", nil
}

// pausesPage shows the pauses and the engine's breakers and holds: of the
// database, or of every database of a fleet when none is named (the
// breakers and holds then of every engine of this replica).
func (s *Server) pausesPage(r *http.Request, d *db, p *pageData) (string, error) {
	st := s.stats.snapshot()
	p.Title, p.Nav, p.Stats = "Pauses, breakers and holds", "pauses", &st
	if s.wholeFleet(r) {
		p.Database, p.AllDatabases = "", true
		st.Pauses, st.PausesUnread = s.allPauses(r.Context())
		p.Pauses = st.Pauses
		return "pauses", nil
	}
	if s.cfg.Fleet != nil {
		s.stats.engineOf(&st, d.Name) // its engine's breakers and holds
	}
	p.Tools = toolsOf(st)
	var err error
	p.Pauses, err = pausesOf(r.Context(), d)
	return "pauses", err
}

func (s *Server) loginPage(r *http.Request, _ *db, p *pageData) (string, error) {
	p.Title, p.Back = "Log in", localPath(r.URL.Query().Get("next"))
	return "login", nil
}
