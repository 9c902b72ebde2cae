package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDatabasesGood(t *testing.T) {
	cfg := mustParse(t, `
databases:
  static:
    - {name: tenant-a, url: "${env:DRAINER_DATABASE_URL}"}
    - name: tenant_b.eu-1
      url: "postgres://drainer@db-b/drainer"
  query:
    url: ${env:DRAINER_DATABASE_URL}
    sql: SELECT name, url FROM tenants WHERE active
`, false)
	d := cfg.Databases
	if d == nil || len(d.Static) != 2 || d.Query == nil {
		t.Fatalf("databases = %+v", d)
	}
	if d.Refresh != DefaultDatabasesRefresh {
		t.Errorf("refresh = %s, want the default %s", d.Refresh, DefaultDatabasesRefresh)
	}
	a, b := d.Static[0], d.Static[1]
	if a.Name != "tenant-a" || a.URL.Reveal() != testEnv["DRAINER_DATABASE_URL"] || a.Line != 3 || a.File != "c.yaml" {
		t.Errorf("static[0] = %s %d %s:%d", a.Name, len(a.URL), a.File, a.Line)
	}
	if b.Name != "tenant_b.eu-1" || b.URL.Reveal() != "postgres://drainer@db-b/drainer" || b.Line != 4 {
		t.Errorf("static[1] = %s %s:%d", b.Name, b.File, b.Line)
	}
	if d.Query.SQL != "SELECT name, url FROM tenants WHERE active" || d.Query.URL.Reveal() != testEnv["DRAINER_DATABASE_URL"] {
		t.Errorf("query = %q", d.Query.SQL)
	}
	if got := strings.Join(d.DatabaseNames(), ","); got != "tenant-a,tenant_b.eu-1" {
		t.Errorf("names = %s", got)
	}
	for _, e := range d.Static {
		u, err := e.ResolveURL()
		if err != nil || u != e.URL {
			t.Errorf("%s: ResolveURL = %v", e.Name, err)
		}
	}

	cfg = mustParse(t, "databases:\n  query: {url: 'host=catalog', sql: SELECT 1}\n  refresh: 5m\n", false)
	if cfg.Databases.Refresh != 5*time.Minute || len(cfg.Databases.Static) != 0 {
		t.Errorf("refresh = %s", cfg.Databases.Refresh)
	}
	if cfg := mustParse(t, "workers: 3\n", false); cfg.Databases != nil {
		t.Errorf("databases without the section: %+v", cfg.Databases)
	}
}

// TestDatabaseResolveURL checks that ResolveURL reads a ${file:…} and an
// ${env:…} again, and reports a reference that no longer resolves without
// revealing anything.
func TestDatabaseResolveURL(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tenant-b.url")
	if err := os.WriteFile(file, []byte("postgres://u:first@h/b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DRAINER_TEST_TENANT_A", "postgres://u:one@h/a")
	yaml := "databases:\n  static:\n" +
		"    - {name: a, url: 'host=h dbname=a password=${env:DRAINER_TEST_TENANT_A}'}\n" +
		"    - {name: b, url: '${file:" + file + "}'}\n" +
		"  query: {url: '${file:" + file + "}', sql: SELECT 1}\n"
	cfg, err := Parse("c.yaml", []byte(yaml), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, b, q := cfg.Databases.Static[0], cfg.Databases.Static[1], cfg.Databases.Query
	if b.URL.Reveal() != "postgres://u:first@h/b" {
		t.Fatalf("loaded url of b differs")
	}
	if err := os.WriteFile(file, []byte("postgres://u:second@h/b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DRAINER_TEST_TENANT_A", "two")
	if u, err := b.ResolveURL(); err != nil || u.Reveal() != "postgres://u:second@h/b" {
		t.Errorf("b after the file changed: %v (changed: %v)", err, u.Reveal() == "postgres://u:second@h/b")
	}
	if u, err := q.ResolveURL(); err != nil || u.Reveal() != "postgres://u:second@h/b" {
		t.Errorf("query url after the file changed: %v", err)
	}
	if u, err := a.ResolveURL(); err != nil || u.Reveal() != "host=h dbname=a password=two" {
		t.Errorf("a after the variable changed: %v", err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	_, err = b.ResolveURL()
	if err == nil || !strings.Contains(err.Error(), "databases b: url: cannot read ${file:"+file+"}") || strings.Contains(err.Error(), "second") {
		t.Errorf("missing file: %v", err)
	}
	// An entry built in code resolves to its URL.
	if u, err := (DatabaseEntry{Name: "x", URL: "host=x"}).ResolveURL(); err != nil || u != "host=x" {
		t.Errorf("built entry: %v", err)
	}
}

func TestDatabasesErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{
			name: "unknown keys",
			yaml: `
databases:
  statik: []
  query: {url: 'host=c', sql: SELECT 1, refesh: 1s}
  static:
    - {name: a, url: 'host=a', nmae: b}
`,
			want: []string{
				`c.yaml:2:3: databases.statik: unknown field; did you mean "static"?`,
				`c.yaml:3:41: databases.query.refesh: unknown field; valid fields: sql, url`,
				`c.yaml:5:32: databases.static[0].nmae: unknown field; did you mean "name"?`,
			},
		},
		{
			name: "no source",
			yaml: `
databases:
  refresh: 10s
`,
			want: []string{`c.yaml:1:1: databases: list at least one database in databases.static or a catalog in databases.query`},
		},
		{
			name: "empty mapping",
			yaml: `
databases: {}
`,
			want: []string{`c.yaml:1:1: databases: list at least one database in databases.static or a catalog in databases.query`},
		},
		{
			name: "names required, well-formed and unique; url required",
			yaml: `
databases:
  static:
    - {url: 'host=a'}
    - {name: Tenant A, url: 'host=a'}
    - {name: b, url: 'host=b'}
    - name: b
      url: 'host=b2'
    - {name: c}
    - {name: d, url: ''}
    - {name: -x, url: 'host=x'}
    - {name: 'abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij1234', url: 'host=y'}
`,
			want: []string{
				`c.yaml:3:7: databases.static[0].name: required field is missing`,
				`c.yaml:4:14: databases.static[1].name: invalid database name "Tenant A": use 1 to 63 lower-case letters, digits, '_', '.' and '-', starting with a letter or digit`,
				`c.yaml:6:13: databases.static[3].name: database name "b" is already used (line 5)`,
				`c.yaml:8:7: databases.static[4].url: required field is missing`,
				`c.yaml:9:22: databases.static[5].url: must not be empty`,
				`c.yaml:10:14: databases.static[6].name: invalid database name "-x": use 1 to 63 lower-case letters, digits, '_', '.' and '-', starting with a letter or digit`,
				`c.yaml:11:14: databases.static[7].name: invalid database name "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij1234": use 1 to 63 lower-case letters, digits, '_', '.' and '-', starting with a letter or digit`,
			},
		},
		{
			name: "inline passwords",
			yaml: `
databases:
  static:
    - {name: a, url: 'postgres://u:hunter2@h/a'}
    - {name: b, url: 'host=h password=hunter2'}
  query: {url: 'postgres://u:hunter2@catalog/c', sql: SELECT 1}
`,
			want: []string{
				`c.yaml:3:22: databases.static[0].url: secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
				`c.yaml:4:22: databases.static[1].url: secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
				`c.yaml:5:16: databases.query.url: secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
			},
		},
		{
			name: "query needs url and sql",
			yaml: `
databases:
  query:
    sql: '  '
  static: [{name: a, url: 'host=a'}]
---
`,
			want: []string{
				`c.yaml:2:3: databases.query.url: required field is missing`,
				`c.yaml:3:10: databases.query.sql: must not be empty: a query returning rows of (name text, url text)`,
			},
		},
		{
			name: "query without sql",
			yaml: `
databases:
  query: {url: 'host=c'}
`,
			want: []string{`c.yaml:2:3: databases.query.sql: required field is missing`},
		},
		{
			name: "refresh must be positive",
			yaml: `
databases:
  static: [{name: a, url: 'host=a'}]
  refresh: 0s
`,
			want: []string{`c.yaml:3:12: databases.refresh: must be positive, got "0s"`},
		},
		{
			name: "database_url beside databases",
			yaml: `
database_url: ${env:DRAINER_DATABASE_URL}
databases:
  static: [{name: a, url: 'host=a'}]
`,
			want: []string{`c.yaml:1:1: database_url: database_url and databases are exclusive: with databases, each database's url is in its entry`},
		},
		{
			name: "wrong shapes",
			yaml: `
databases:
  static:
    - tenant-a
    -
    - {name: b, url: ['x']}
  query: [x]
  refresh: soon
`,
			want: []string{
				`c.yaml:3:7: databases.static[0]: must be a mapping, got a string`,
				`c.yaml:4:6: databases.static[1]: must be a mapping, got null`,
				`c.yaml:5:22: databases.static[2].url: must be a string, got a list`,
				`c.yaml:6:10: databases.query: must be a mapping, got a list`,
				`c.yaml:7:12: databases.refresh: invalid duration "soon": write a duration like "30s", "10m", "1h30m" or "7d"`,
			},
		},
		{
			name: "static not a list",
			yaml: `
databases:
  static: {a: 'host=a'}
`,
			want: []string{`c.yaml:2:11: databases.static: must be a list of mappings, got a mapping`},
		},
		{
			name: "unset reference is an error outside check mode",
			yaml: `
databases:
  static: [{name: a, url: '${env:NOPE_URL}'}]
`,
			want: []string{`c.yaml:2:27: databases.static[0].url: environment variable NOPE_URL is not set (${env:NOPE_URL})`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parse(t, tt.yaml, false)
			if err == nil {
				t.Fatalf("Parse succeeded (%s), want errors", cfg.Summary())
			}
			assertLines(t, errorLines(t, err), tt.want)
		})
	}
}

// TestDatabasesCheckMode checks that an unset reference in databases: is a
// warning in check mode, and that problems of the section are still errors.
func TestDatabasesCheckMode(t *testing.T) {
	cfg := mustParse(t, `
databases:
  static: [{name: a, url: '${env:NOPE_URL}'}]
  query: {url: '${file:/run/secrets/catalog}', sql: 'SELECT name, url FROM t'}
`, true)
	want := []string{
		`c.yaml:2:27: databases.static[0].url: environment variable NOPE_URL is not set (${env:NOPE_URL})`,
		`c.yaml:3:16: databases.query.url: cannot read ${file:/run/secrets/catalog}: file does not exist`,
	}
	var got []string
	for _, w := range cfg.Warnings {
		if strings.Contains(w, "databases") {
			got = append(got, w)
		}
	}
	assertLines(t, got, want)
	_, err := parse(t, "databases:\n  static: [{name: A, url: '${env:NOPE_URL}'}]\n", true)
	assertLines(t, errorLines(t, err), []string{
		`c.yaml:2:19: databases.static[0].name: invalid database name "A": use 1 to 63 lower-case letters, digits, '_', '.' and '-', starting with a letter or digit`,
	})
}

// TestCheckDatabaseURL: a URL of another scheme than postgres:// or
// postgresql:// is refused by name (with the scheme meant, when it is a
// typo), never repeating the string; keyword/value strings pass.
func TestCheckDatabaseURL(t *testing.T) {
	for url, want := range map[string]string{
		"postgres://u:pw@h/db":              "",
		"postgresql://h/db?sslmode=require": "",
		"POSTGRES://h/db":                   "",
		"host=h dbname=db password=a://b":   "",
		"host=h user=u":                     "",
		"postgress://u:pw@h/db":             `the database URL's scheme is "postgress": did you mean postgres://?`,
		"postgre://h/db":                    `the database URL's scheme is "postgre": did you mean postgres://?`,
		"postgresq://h/db":                  `the database URL's scheme is "postgresq": did you mean postgresql://?`,
		"mysql://u:pw@h/db":                 `the database URL's scheme is "mysql": want postgres:// or postgresql:// (or keyword=value pairs)`,
		"  https://u:pw@h/db":               `the database URL's scheme is "https": want postgres:// or postgresql:// (or keyword=value pairs)`,
	} {
		err := CheckDatabaseURL(url)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("CheckDatabaseURL(%q) = %q; want %q", url, got, want)
		}
		if strings.Contains(got, "pw") {
			t.Errorf("CheckDatabaseURL(%q) repeats the password: %s", url, got)
		}
	}
}

// TestDatabaseURLsParseAsRunReadsThem: `drainer check` refuses a
// connection string that `drainer run` (and the fleet, and every command)
// could not read, in the same words, naming the key and its reference,
// never the value.
func TestDatabaseURLsParseAsRunReadsThem(t *testing.T) {
	env := map[string]string{"PURL": "postgres://u:pw%zz-secret@127.0.0.1/db", "PORTLESS": "postgres://u:pw-secret@h:99999/x"}
	opts := func(check bool) LoadOptions {
		return LoadOptions{Check: check, LookupEnv: func(n string) (string, bool) { v, ok := env[n]; return v, ok }}
	}
	single := "database_url: ${env:PURL}\nadapters:\n  p: {type: http, url: \"http://p/{tool_name}\"}\nroutes:\n  t: {adapter: p}\n"
	fleet := "databases:\n  static:\n    - {name: a, url: \"${env:PORTLESS}\"}\nadapters:\n  p: {type: http, url: \"http://p/{tool_name}\"}\nroutes:\n  t: {adapter: p}\n"
	for _, check := range []bool{true, false} {
		for yaml, want := range map[string]string{
			single: "c.yaml:1:15: database_url: cannot parse the database URL: failed to parse as URL (invalid percent-encoded token in password) (the value of ${env:PURL})",
			fleet:  "c.yaml:3:22: databases.static[0].url: cannot parse the database URL: invalid port (the value of ${env:PORTLESS})",
		} {
			_, err := Parse("c.yaml", []byte(yaml), opts(check))
			if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret") {
				t.Errorf("check %v: got %v, want %q (and no value)", check, err, want)
			}
		}
	}
	// Unset in check mode: a warning, not checked.
	if _, err := Parse("c.yaml", []byte(strings.Replace(single, "PURL", "UNSET", 1)), opts(true)); err != nil {
		t.Errorf("an unset reference in check mode: %v", err)
	}
}
