package config

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultDatabasesRefresh is how often the catalog query of databases: is
// run again (databases.refresh).
const DefaultDatabasesRefresh = 30 * time.Second

// Databases lists the databases one fleet drains (the databases: section):
// a fixed list, a catalog query, or both. Each database has its own drainer
// schema. With databases:, the top-level database_url is refused in the
// same file, and `run` ignores --database-url and DRAINER_DATABASE_URL.
type Databases struct {
	// Static is a fixed list of databases.
	Static []DatabaseEntry `yaml:"static"`
	// Query reads more databases from a catalog database.
	Query *DatabaseQuery `yaml:"query"`
	// Refresh is how often the catalog is read again (default 30s).
	Refresh time.Duration `yaml:"refresh"`
}

// DatabaseEntry is one database of databases.static.
type DatabaseEntry struct {
	// Name identifies the database in logs, metrics (the database label)
	// and commands (--database NAME); see ValidDatabaseName.
	Name string `yaml:"name"`
	// URL is the connection string, expanded when the config was loaded.
	URL Secret `yaml:"url"`

	// ref re-expands the URL as written (see ResolveURL).
	ref reference
	// File and Line locate the entry's name in the config file.
	File string `yaml:"-"`
	Line int    `yaml:"-"`
}

// DatabaseQuery is databases.query: SQL run on the catalog database at URL
// that returns rows of (name text, url text).
type DatabaseQuery struct {
	URL Secret `yaml:"url"`
	SQL string `yaml:"sql"`

	ref reference
}

// ResolveURL expands the entry's url as written in the config file again,
// reading its ${env:…} and ${file:…} references anew, so that a rotated
// credentials file is picked up without a reload. The error names the
// entry and the reference, never a value.
func (e DatabaseEntry) ResolveURL() (Secret, error) {
	return e.ref.resolve(e.URL, "databases "+e.Name)
}

// ResolveURL expands the catalog's url again, like DatabaseEntry.ResolveURL.
func (q DatabaseQuery) ResolveURL() (Secret, error) {
	return q.ref.resolve(q.URL, "databases.query")
}

// reference is a Secret value as written (with its references unexpanded)
// and the options that expand it.
type reference struct {
	raw  string
	opts *LoadOptions
}

// resolve expands the reference, or returns loaded when there is nothing to
// expand again (a value built in code, or written without references).
func (r reference) resolve(loaded Secret, what string) (Secret, error) {
	if r.opts == nil || !hasReference(r.raw) {
		return loaded, nil
	}
	opts := *r.opts
	opts.Check = false
	x := (&expander{opts: opts}).expand(r.raw)
	if len(x.errs) > 0 {
		return "", fmt.Errorf("%s: url: %s", what, strings.Join(x.errs, "; "))
	}
	return Secret(x.value), nil
}

// databaseName is the form of a database name: fit for a metric label, a
// log field and a command-line argument.
var databaseName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// ValidateDatabaseName checks a database name: 1 to 63 characters, lower-case
// letters, digits, '_', '.' and '-', starting with a letter or a digit. The
// error quotes the name (names are not secret).
func ValidateDatabaseName(name string) error {
	if !databaseName.MatchString(name) {
		return fmt.Errorf("invalid database name %q: use 1 to 63 lower-case letters, digits, '_', '.' and '-', starting with a letter or digit", name)
	}
	return nil
}

// DatabaseNames returns the names of the static entries, in file order.
func (d *Databases) DatabaseNames() []string {
	names := make([]string, len(d.Static))
	for i, e := range d.Static {
		names[i] = e.Name
	}
	return names
}

// recordDatabaseSources keeps, for database_url and each url of databases:, the value as
// written and the options that expand it, so it can be expanded again later.
func (d *decoder) recordDatabaseSources(cfg *Config) {
	opts := d.exp.opts
	if s := d.src["database_url"]; s != nil {
		cfg.databaseURL = reference{raw: s.raw, opts: &opts}
	}
	dbs := cfg.Databases
	if dbs == nil {
		return
	}
	for i := range dbs.Static {
		e := &dbs.Static[i]
		p := fmt.Sprintf("databases.static[%d]", i)
		if s := d.src[p+".url"]; s != nil {
			e.ref = reference{raw: s.raw, opts: &opts}
		}
		e.File = d.file
		if s := d.src[p+".name"]; s != nil {
			e.Line = s.keyLine
		} else if s := d.src[p]; s != nil {
			e.Line = s.line
		}
	}
	if q := dbs.Query; q != nil {
		if s := d.src["databases.query.url"]; s != nil {
			q.ref = reference{raw: s.raw, opts: &opts}
		}
	}
}

// databases checks the databases: section: at least one source, names
// well-formed and unique, every url present (its password from a
// reference), the catalog's sql present, refresh positive; and database_url
// not set beside it.
func (v *validator) databases() {
	dbs := v.cfg.Databases
	if dbs == nil {
		return
	}
	if v.set("database_url") {
		v.keyErrorf("database_url", "database_url and databases are exclusive: with databases, each database's url is in its entry")
	}
	static := "databases.static"
	if noStatic := !v.set(static) || v.usable(static) && len(dbs.Static) == 0; noStatic && !v.set("databases.query") {
		v.keyErrorf("databases", "list at least one database in databases.static or a catalog in databases.query")
	}
	seen := make(map[string]string, len(dbs.Static))
	for i, e := range dbs.Static {
		p := fmt.Sprintf("databases.static[%d]", i)
		if !v.usable(p) {
			continue // null, or not a mapping: reported while decoding
		}
		if f := p + ".name"; v.require(f) {
			if err := ValidateDatabaseName(e.Name); err != nil {
				if v.src[f].refs > 0 { // never quote an expanded value
					err = fmt.Errorf("invalid database name %s", v.quoted(f))
				}
				v.errorf(f, "%v", err)
			} else if first, dup := seen[e.Name]; dup {
				line, _ := v.at(first)
				v.errorf(f, "database name %s is already used (line %d)", v.quoted(f), line)
			} else {
				seen[e.Name] = f
			}
		}
		v.databaseURL(p+".url", e.URL)
	}
	if q := "databases.query"; v.set(q) && dbs.Query != nil {
		v.databaseURL(q+".url", dbs.Query.URL)
		if f := q + ".sql"; v.require(f) && strings.TrimSpace(dbs.Query.SQL) == "" {
			v.errorf(f, "must not be empty: a query returning rows of (name text, url text)")
		}
	}
	v.positive("databases.refresh", dbs.Refresh)
}

// databaseURL checks a url of databases: it is required, and its password
// must come from a reference.
func (v *validator) databaseURL(path string, url Secret) {
	if !v.set(path) {
		v.keyErrorf(path, "required field is missing")
		return
	}
	if literalPassword(v.src[path].raw) {
		v.errorf(path, errInlineSecret)
		return
	}
	if v.usable(path) && strings.TrimSpace(v.src[path].raw) == "" {
		v.errorf(path, "must not be empty")
		return
	}
	v.parsesAsDatabaseURL(path, url)
}

// parsesAsDatabaseURL refuses a connection string the driver cannot read
// (ParseDatabaseURL), as `drainer run` and the commands would. A value
// left unexpanded (check mode, its reference unset) is not checked.
func (v *validator) parsesAsDatabaseURL(path string, url Secret) {
	if !v.usable(path) || url == "" {
		return
	}
	if _, err := ParseDatabaseURL(url.Reveal()); err != nil {
		if v.src[path].refs > 0 {
			err = fmt.Errorf("%w (the value of %s)", err, v.src[path].reference())
		}
		v.errorf(path, "%v", err)
	}
}

var urlScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

// ParseDatabaseURL reads a connection string as `drainer run`, the fleet
// and every command do (pgxpool.ParseConfig: its pool_ parameters are the
// pool's), after CheckDatabaseURL, so that `drainer check` refuses what
// they would. Its error says why, never holding the string itself: the
// driver's own message quotes it, with a password it could not always
// find left in.
func ParseDatabaseURL(s string) (*pgxpool.Config, error) {
	if err := CheckDatabaseURL(s); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(s)
	if err != nil {
		return nil, fmt.Errorf("cannot parse the database URL: %s", parseReason(err))
	}
	return pc, nil
}

// parseReason is what a parse error of a connection string says, without
// the string: the driver's message is "cannot parse `STRING`: REASON".
func parseReason(err error) string {
	msg := err.Error()
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		if i := strings.LastIndex(msg, "`: "); i >= 0 {
			return msg[i+len("`: "):]
		}
		return "not a connection string the driver reads"
	}
	if strings.Contains(msg, "password") {
		return "not a connection string the driver reads"
	}
	return msg
}

// CheckDatabaseURL refuses a connection string that is a URL of another
// scheme than postgres:// or postgresql:// (a typo such as postgress://
// would otherwise be read as keyword=value pairs and refused for its
// syntax). Keyword/value strings ("host=... dbname=...") pass: the driver
// reads them. The error never holds the string itself, which may hold a
// password.
func CheckDatabaseURL(s string) error {
	scheme, _, ok := strings.Cut(strings.TrimSpace(s), "://")
	if !ok || !urlScheme.MatchString(scheme) {
		return nil
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		return nil
	}
	if c := closest(scheme, []string{"postgresql", "postgres"}); c != "" {
		return fmt.Errorf("the database URL's scheme is %q: did you mean %s://?", scheme, c)
	}
	return fmt.Errorf("the database URL's scheme is %q: want postgres:// or postgresql:// (or keyword=value pairs)", scheme)
}
