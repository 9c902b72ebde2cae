package console

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/internal/fleet"
	"github.com/drainer-io/drainer/ops"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

//go:embed assets
var assets embed.FS

// Config configures a console.
type Config struct {
	// Addr is the listen address (host:port).
	Addr string
	// Listener, when set, is listened on instead of Addr (the daemon takes
	// the address before it connects, to refuse a taken one at once).
	Listener net.Listener
	// Actions enables the operator actions; Token then opens them.
	Actions bool
	// Token is the bearer token (the revealed secret).
	Token string
	// Databases are the databases shown without a fleet. The first is the
	// default of every query.
	Databases []Database
	// Fleet, when set, is the fleet of databases shown instead (databases:
	// in the config), each through Store.
	Fleet Fleet
	Store *store.Store
	// Adapters returns the adapters' breakers and holds (nil: none known).
	Adapters func() []drainer.AdapterState
	// EngineAdapters, with a fleet, returns the breakers and holds of the
	// engines of this replica, by the database each drains: a database
	// missing from the map is not drained here (nil: none known).
	EngineAdapters func() map[string][]drainer.AdapterState
	// Names returns the routes and adapters of the config in force: a
	// pause naming another is refused (nil, or nothing returned: not
	// checked).
	Names func() (routes, adapters []string)
	// Routed returns the tools the routing in force names (nil: not
	// known; the overview then flags the unrouted tools the daemons'
	// backlog snapshot found).
	Routed func() []string
	// Gatherer, when set, supplies drainer_dispatch_total for the dispatch
	// rates.
	Gatherer prometheus.Gatherer
	// SampleEvery is how often the backlog is sampled for the overview
	// (default 2s).
	SampleEvery time.Duration
	Logger      *slog.Logger
}

// Database is one database the console shows.
type Database struct {
	Name  string
	DB    store.TxDB
	Store *store.Store
}

// Fleet is what the console reads of a fleet of databases (*fleet.Fleet).
// The overview's counts come from Backlogs, which every replica publishes
// in the coordination database and the console's replica reads back at
// each heartbeat (from memory: no connection); one database's details come
// through Pool, a pool of one connection opened on first use and closed
// when idle.
type Fleet interface {
	Databases() []string
	Backlogs() ([]fleet.Backlog, time.Time, error)
	Pool(name string) (*pgxpool.Pool, error)
}

// db is a Database with its operator client.
type db struct {
	Database
	ops *ops.Client
}

// Server is a running console.
type Server struct {
	cfg    Config
	log    *slog.Logger
	dbs    []*db
	pages  map[string]*template.Template
	static http.Handler
	auth   *auth
	stats  *sampler
	// outcomes are the answers of recent actions, for their pages.
	outcomes *outcomes
	// pauses are every database's pauses, read for the whole fleet's
	// overview and kept a few seconds.
	pauses fleetPauses
	srv    *http.Server
	ln     net.Listener
	wg     sync.WaitGroup
	stop   context.CancelFunc
}

// DefaultSampleEvery is how often the overview's backlog is sampled.
const DefaultSampleEvery = 2 * time.Second

// AddrInUseError is a console address that cannot be listened on: the CLI
// exits 2 naming it.
type AddrInUseError struct {
	Addr string
	Err  error
}

func (e *AddrInUseError) Error() string {
	return fmt.Sprintf("console address %s: %v", e.Addr, e.Err)
}
func (e *AddrInUseError) Unwrap() error { return e.Err }

// Listen takes the console's address: an *AddrInUseError when it cannot.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &AddrInUseError{Addr: addr, Err: err}
	}
	return ln, nil
}

// New checks cfg and prepares a console; Start serves it.
func New(cfg Config) (*Server, error) {
	if cfg.Fleet != nil && cfg.Store == nil {
		return nil, errors.New("console: a fleet needs its Store")
	}
	if len(cfg.Databases) == 0 && cfg.Fleet == nil {
		return nil, errors.New("console: no database")
	}
	if cfg.Actions && cfg.Token == "" {
		return nil, errors.New("console: actions need a token (console.token)")
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = DefaultSampleEvery
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log}
	for _, d := range cfg.Databases {
		s.dbs = append(s.dbs, &db{Database: d, ops: ops.New(d.DB, d.Store)})
	}
	var err error
	if s.pages, err = parsePages(); err != nil {
		return nil, err
	}
	sub, _ := fs.Sub(assets, "assets/static")
	s.static = http.StripPrefix("/static/", http.FileServerFS(sub))
	s.auth = newAuth(cfg.Actions, cfg.Token)
	s.outcomes = newOutcomes()
	s.stats = newSampler(s, historyLen)
	return s, nil
}

// Start listens on cfg.Addr (an *AddrInUseError when it cannot) and serves
// until Shutdown.
func (s *Server) Start(ctx context.Context) error {
	ln := s.cfg.Listener
	if ln == nil {
		var err error
		if ln, err = Listen(s.cfg.Addr); err != nil {
			return err
		}
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, MaxHeaderBytes: 64 << 10}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stop = cancel
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("console server stopped", "err", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		s.stats.run(sctx, s.cfg.SampleEvery)
	}()
	return nil
}

// Addr is the address the console listens on (after Start).
func (s *Server) Addr() string {
	if s.ln == nil {
		return s.cfg.Addr
	}
	return s.ln.Addr().String()
}

// Shutdown stops serving and sampling.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	s.stop()
	s.wg.Wait()
	return err
}

// Handler is the console's routes behind its security headers.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /static/", s.static)
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/static/favicon.svg", http.StatusMovedPermanently)
	})
	// Pages. A wide one, with a fleet and no database named, shows every
	// database (its handler gets none); any other shows the one named, the
	// first by default.
	mux.HandleFunc("GET /{$}", s.widePage(s.overviewPage))
	mux.HandleFunc("GET /rows", s.widePage(s.rowsPage))
	mux.HandleFunc("GET /rows/{key}", s.widePage(s.rowPage))
	mux.HandleFunc("GET /runs/{run}", s.widePage(s.runPage))
	mux.HandleFunc("GET /parked", s.widePage(s.parkedPage))
	mux.HandleFunc("GET /pauses", s.widePage(s.pausesPage))
	mux.HandleFunc("GET /results/{id}", s.results)
	mux.HandleFunc("GET /login", s.page(s.loginPage))
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /logout", s.logout)
	// API.
	mux.HandleFunc("GET /api/v1/stats", s.wideAPI(s.apiStats))
	mux.HandleFunc("GET /api/v1/rows", s.wideAPI(s.apiRows))
	mux.HandleFunc("GET /api/v1/rows/{key}", s.wideAPI(s.apiRow))
	mux.HandleFunc("GET /api/v1/runs/{run}", s.wideAPI(s.apiRun))
	mux.HandleFunc("GET /api/v1/pauses", s.wideAPI(s.apiPauses))
	mux.HandleFunc("POST /api/v1/actions/{verb}", s.action)
	mux.HandleFunc("GET /api/v1/results/{id}", s.apiResults)
	mux.HandleFunc("/", s.notFound)
	return secure(s.storableText(mux))
}

// storableText answers 400 to a request whose path or query holds text no
// key, run or filter can be: a NUL byte, or bytes that are not UTF-8.
// The database refuses such text (SQLSTATE 22021), which reached the
// handlers as a 500 and an error in the log, for anyone who could reach
// the console.
func (s *Server) storableText(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bad := !storable(r.URL.Path)
		for k, vs := range r.URL.Query() {
			bad = bad || !storable(k)
			for _, v := range vs {
				bad = bad || !storable(v)
			}
		}
		if !bad {
			h.ServeHTTP(w, r)
			return
		}
		const msg = "the address holds a NUL byte or bytes that are not UTF-8: no key, run or filter is such text"
		if strings.HasPrefix(r.URL.Path, "/api/") {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": msg})
			return
		}
		http.Error(w, msg, http.StatusBadRequest)
	})
}

// storable reports text the database stores: valid UTF-8 without NUL.
func storable(v string) bool { return utf8.ValidString(v) && !strings.ContainsRune(v, 0) }

// secure sets the security headers of every answer.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("Cross-Origin-Opener-Policy", "same-origin")
		hd.Set("Cross-Origin-Resource-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, "/static/") {
			hd.Set("Cache-Control", "no-store")
		}
		if r.TLS != nil {
			hd.Set("Strict-Transport-Security", "max-age=31536000")
		}
		h.ServeHTTP(w, r)
	})
}

// names lists the databases shown: the fleet's current list, or the
// configured ones.
func (s *Server) names() []string {
	if s.cfg.Fleet != nil {
		return s.cfg.Fleet.Databases()
	}
	out := make([]string, len(s.dbs))
	for i, d := range s.dbs {
		out[i] = d.Name
	}
	return out
}

// scoped says whether pages name their database in links and forms: when
// the console shows more than one (a single database's pages are as they
// were before databases existed).
func (s *Server) scoped() bool { return s.cfg.Fleet != nil || len(s.dbs) > 1 }

// database picks the database a request names (parameter database, else
// the first listed): a 404 naming an unknown one.
func (s *Server) database(r *http.Request) (*db, error) {
	return s.databaseNamed(r.URL.Query().Get("database"))
}

func (s *Server) databaseNamed(name string) (*db, error) {
	if s.cfg.Fleet == nil {
		if name == "" {
			return s.dbs[0], nil
		}
		for _, d := range s.dbs {
			if d.Name == name {
				return d, nil
			}
		}
		return nil, unknownDatabase(name)
	}
	if name == "" {
		list := s.cfg.Fleet.Databases()
		if len(list) == 0 {
			return nil, &apiError{Status: http.StatusServiceUnavailable, Msg: "the fleet lists no database yet"}
		}
		name = list[0]
	}
	pool, err := s.cfg.Fleet.Pool(name)
	var ue *fleet.UnknownDatabaseError
	if errors.As(err, &ue) {
		return nil, unknownDatabase(name)
	}
	if err != nil {
		return nil, err
	}
	return &db{Database: Database{Name: name, DB: pool, Store: s.cfg.Store}, ops: ops.New(pool, s.cfg.Store)}, nil
}

func unknownDatabase(name string) error {
	return &apiError{Status: http.StatusNotFound, Msg: fmt.Sprintf("unknown database %q: not one of the databases this console shows", name)}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
