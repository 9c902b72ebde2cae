package catalog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// QueryTimeout bounds one run of the catalog query, connecting included.
const QueryTimeout = 30 * time.Second

// ApplicationName is the application_name of the catalog connection (unless
// its url sets one), so that operators can tell it apart in
// pg_stat_activity.
const ApplicationName = "drainer-catalog"

// Database is one database to drain.
type Database struct {
	// Name identifies the database in logs, metrics and commands.
	Name string
	// URL is its connection string.
	URL config.Secret
}

// Catalog lists the databases of a databases: section. Its methods are safe
// for concurrent use; List calls run one at a time.
type Catalog struct {
	cfg *config.Databases
	log *slog.Logger

	mu sync.Mutex
	// shared, when set, is the connection the query runs over, the
	// caller's (the fleet's coordination connection): conn stays nil.
	shared Querier
	conn   *pgx.Conn // the catalog connection of its own; nil when closed
	// static holds the url each static entry last resolved to, by name.
	static map[string]config.Secret
	// rows is the last list the query returned (valid rows only).
	rows []Database
	// reported holds the problems logged by the last List, so a problem
	// that persists is logged once, not at every refresh.
	reported map[string]bool
}

// New returns a catalog of cfg's databases; it connects on the first List.
// A nil log discards.
func New(cfg *config.Databases, log *slog.Logger) *Catalog {
	if cfg == nil {
		cfg = &config.Databases{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Catalog{cfg: cfg, log: log, static: make(map[string]config.Secret), reported: make(map[string]bool)}
}

// Querier is a connection the catalog query can run over without owning
// it: a pool of one connection (*pgxpool.Pool) shared with other work.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// NewShared is New with the query run over q, the caller's connection to
// the catalog database, rather than over one of the catalog's own: a fleet
// replica, whose coordination connection is to the catalog database, so
// holds one connection to it, not two. The caller keeps q open while List
// may be called, and closes it; Close leaves it open. q must reach the
// database cfg's query names (its url is not read).
func NewShared(cfg *config.Databases, q Querier, log *slog.Logger) *Catalog {
	c := New(cfg, log)
	c.shared = q
	return c
}

// List returns every database, sorted by name: the static entries, each url
// resolved again, and the rows of the catalog query. A static entry wins
// over a query row of the same name; a row whose name or url is unusable is
// skipped; both are logged. The error is non-nil when part of the list
// could not be read afresh (a url that no longer resolves, a failed query):
// the list then holds the last known value of that part, and callers keep
// draining it.
func (c *Catalog) List(ctx context.Context) ([]Database, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	problems := make(map[string]bool)
	report := func(msg string, args ...any) {
		key := fmt.Sprint(append([]any{msg}, args...)...)
		problems[key] = true
		if !c.reported[key] {
			c.log.Warn(msg, args...)
		}
	}
	defer func() { c.reported = problems }()

	var errs []error
	byName := make(map[string]Database)
	for _, e := range c.cfg.Static {
		url, err := e.ResolveURL()
		if err != nil {
			// Keep what it resolved to last (at load, at worst).
			url = cmp.Or(c.static[e.Name], e.URL)
			errs = append(errs, err)
			report("databases: url does not resolve; keeping the last one", "database", e.Name, "error", err.Error())
		}
		c.static[e.Name] = url
		byName[e.Name] = Database{Name: e.Name, URL: url}
	}
	if c.cfg.Query != nil {
		rows, err := c.query(ctx, report)
		if err != nil {
			errs = append(errs, err)
			report("databases: catalog query failed; keeping the last known list", "databases", len(c.rows), "error", err.Error())
		} else {
			c.rows = rows
		}
		for _, d := range c.rows {
			if _, ok := byName[d.Name]; ok {
				report("databases: catalog row names a static database; the static entry wins", "database", d.Name)
				continue
			}
			byName[d.Name] = d
		}
	}
	list := make([]Database, 0, len(byName))
	for _, d := range byName {
		list = append(list, d)
	}
	slices.SortFunc(list, func(a, b Database) int { return strings.Compare(a.Name, b.Name) })
	return list, errors.Join(errs...)
}

// query runs the catalog query, reopening the connection when it is closed
// or failed; a connection that fails on reuse is reopened once at once. A
// shared connection is the caller's to reopen (a pool checks an idle
// connection before handing it out, and replaces one that failed).
func (c *Catalog) query(ctx context.Context, report func(string, ...any)) ([]Database, error) {
	ctx, cancel := context.WithTimeout(ctx, QueryTimeout)
	defer cancel()
	if c.shared != nil {
		rows, err := c.read(ctx, c.shared, report)
		if err != nil {
			return nil, fmt.Errorf("databases.query: %w", err)
		}
		return rows, nil
	}
	for attempt := 0; ; attempt++ {
		reused := c.conn != nil && !c.conn.IsClosed()
		if !reused {
			c.closeConn()
			url, err := c.cfg.Query.ResolveURL()
			if err != nil {
				return nil, err
			}
			if c.conn, err = Connect(ctx, url, ApplicationName); err != nil {
				return nil, fmt.Errorf("databases.query: %w", err)
			}
		}
		rows, err := c.read(ctx, c.conn, report)
		if err == nil {
			return rows, nil
		}
		c.closeConn()
		if !reused || attempt > 0 || ctx.Err() != nil {
			return nil, fmt.Errorf("databases.query: %w", err)
		}
	}
}

// read runs the query on q and keeps its valid rows.
func (c *Catalog) read(ctx context.Context, q Querier, report func(string, ...any)) ([]Database, error) {
	rs, err := q.Query(ctx, c.cfg.Query.SQL)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	if n := len(rs.FieldDescriptions()); n != 2 {
		// A connection that sends the query without preparing it first
		// (the fleet's coordination connection) learns of the server's
		// error only with the rows: the query that failed has no columns,
		// and its error, not the count, says what is wrong.
		rs.Close()
		if err := rs.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("the query returns %d columns; it must return two: name and url", n)
	}
	var out []Database
	seen := make(map[string]int)
	for pos := 1; rs.Next(); pos++ {
		var name, url *string
		if err := rs.Scan(&name, &url); err != nil {
			return nil, fmt.Errorf("row %d: %w (the query must return name text, url text)", pos, err)
		}
		switch {
		case name == nil:
			report("databases: catalog row skipped: name is null", "row", pos)
		case config.ValidateDatabaseName(*name) != nil:
			report("databases: catalog row skipped: invalid name (1 to 63 lower-case letters, digits, '_', '.' and '-', starting with a letter or digit)",
				"row", pos, "name", showName(*name))
		case url == nil || strings.TrimSpace(*url) == "":
			report("databases: catalog row skipped: url is null or empty", "row", pos, "database", *name)
		case seen[*name] > 0:
			report("databases: catalog row skipped: the name is already used by an earlier row", "row", pos, "database", *name, "first_row", seen[*name])
		default:
			seen[*name] = pos
			out = append(out, Database{Name: *name, URL: config.Secret(*url)})
		}
	}
	if err := rs.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// showName renders an invalid name for a log, unless it may be a
// connection string (the query's columns swapped): then it is left out.
func showName(name string) string {
	if len(name) > 63 || strings.ContainsAny(name, ":/@=") {
		return "(not shown: it may be a connection string)"
	}
	return fmt.Sprintf("%q", name)
}

// closeConn closes the catalog connection, if open.
func (c *Catalog) closeConn() {
	if c.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.conn.Close(ctx)
	c.conn = nil
}

// Close closes the catalog connection of its own (a shared one is the
// caller's). List may be called again after it (it reconnects).
func (c *Catalog) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeConn()
}

// Connect opens a connection to url. Its errors never hold the url, the
// user or the password: an unparsable url says why
// (config.ParseDatabaseURL), a failed attempt names the server's address
// and the cause. A non-empty
// appName sets application_name unless the url sets one. The url is read
// as `drainer run` reads it: its pool settings (pool_max_conns and the
// other pool_ parameters) are the pool's, not the server's, so one url
// serves run, migrate and every command.
func Connect(ctx context.Context, url config.Secret, appName string) (*pgx.Conn, error) {
	return connect(ctx, url, appName, false)
}

// ConnectSession is Connect for a command that needs a session of its own
// (migrate: its advisory locks), with drainer's session settings
// (store.SessionDefaults): a pooler that refuses or drops them is named.
func ConnectSession(ctx context.Context, url config.Secret, appName string) (*pgx.Conn, error) {
	return connect(ctx, url, appName, true)
}

func connect(ctx context.Context, url config.Secret, appName string, session bool) (*pgx.Conn, error) {
	pc, err := config.ParseDatabaseURL(url.Reveal())
	if err != nil {
		return nil, err
	}
	cc := pc.ConnConfig
	if _, set := cc.RuntimeParams["application_name"]; !set && appName != "" {
		cc.RuntimeParams["application_name"] = appName
	}
	if session {
		store.SessionDefaults(cc)
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		if ce, ok := errors.AsType[*pgconn.ConnectError](err); ok && errors.Unwrap(ce) != nil {
			err = errors.Unwrap(ce)
		}
		return nil, fmt.Errorf("connect: %w", store.PoolerHint(err))
	}
	return conn, nil
}
