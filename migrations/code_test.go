package migrations

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5"
)

// codeRevisionFile records the revision and content hash of code/.
const codeRevisionFile = "testdata/code_revision"

// TestCodeRevisionNamesTheFiles: code/ and CodeRevision change together, so
// that an older daemon never reinstalls its definitions over newer ones.
func TestCodeRevisionNamesTheFiles(t *testing.T) {
	t.Parallel()
	_, sum, err := Code(DefaultSchema)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d %s\n", CodeRevision, sum)
	got, err := os.ReadFile(codeRevisionFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s holds %q, the code is %q: after changing code/, bump CodeRevision (code.go) and write %q to %s",
			codeRevisionFile, strings.TrimSpace(string(got)), strings.TrimSpace(want), strings.TrimSpace(want), codeRevisionFile)
	}
}

// definitions reads every function, view and trigger of the drainer schema
// as the database holds it, by a name that tells overloads apart.
func definitions(t *testing.T, conn *pgx.Conn) map[string]string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
	    SELECT 'function ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')', pg_get_functiondef(p.oid)
	      FROM pg_proc p WHERE p.pronamespace = 'drainer'::regnamespace
	    UNION ALL
	    SELECT 'view ' || c.relname, pg_get_viewdef(c.oid, true)
	      FROM pg_class c WHERE c.relnamespace = 'drainer'::regnamespace AND c.relkind = 'v'
	    UNION ALL
	    SELECT 'trigger ' || g.tgname, pg_get_triggerdef(g.oid)
	      FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
	     -- a partitioned table's trigger only, not its copies on the
	     -- partitions (the queue's generations): they share its name, and
	     -- which of them a map kept would depend on the scan's order
	     WHERE c.relnamespace = 'drainer'::regnamespace AND NOT g.tgisinternal AND g.tgparentid = 0`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var name, def string
	if _, err := pgx.ForEachRow(rows, []any{&name, &def}, func() error { out[name] = def; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

var declared = regexp.MustCompile(`(?m)^CREATE OR REPLACE (FUNCTION|VIEW|TRIGGER) (?:\{\{\.schema\}\}\.)?(\w+)`)

// TestDefinitionsEqualTheFiles: after `drainer migrate` the schema holds
// exactly the functions, views and triggers of code/ (none that only a
// numbered migration defines), and each is what its file says: running
// every file again changes no definition.
func TestDefinitionsEqualTheFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := Migrate(ctx, conn, DefaultSchema, nil); err != nil {
		t.Fatal(err)
	}
	before := definitions(t, conn)

	// What the files declare, file by file.
	fromFiles := map[string]int{}
	inDB := map[string]int{}
	for name := range before {
		kind, rest, _ := strings.Cut(name, " ")
		base, _, _ := strings.Cut(rest, "(")
		inDB[kind+" "+base]++
	}
	var files []string
	err = fs.WalkDir(code, "code", func(path string, d fs.DirEntry, err error) error {
		// install.sql names the files; grants.sql grants some of the
		// functions (it declares no object of its own).
		if err == nil && !d.IsDir() && path != "code/install.sql" && path != "code/grants.sql" {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		body, err := fs.ReadFile(code, path)
		if err != nil {
			t.Fatal(err)
		}
		ms := declared.FindAllStringSubmatch(string(body), -1)
		if len(ms) == 0 {
			t.Errorf("%s declares no function, view or trigger", path)
		}
		for _, m := range ms {
			fromFiles[strings.ToLower(m[1])+" "+m[2]]++
			if want := strings.TrimSuffix(path[strings.LastIndex(path, "/")+1:], ".sql"); m[2] != want {
				t.Errorf("%s declares %s %s: one object per file, named as the file", path, m[1], m[2])
			}
		}
		sql := strings.ReplaceAll(string(body), "{{.schema}}", DefaultSchema)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	if !maps.Equal(fromFiles, inDB) {
		t.Errorf("the database holds %v\nthe files declare   %v", slices.Sorted(maps.Keys(inDB)), slices.Sorted(maps.Keys(fromFiles)))
	}
	install, err := fs.ReadFile(code, "code/install.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range append(files, "code/grants.sql") {
		if !strings.Contains(string(install), `{{ template "`+strings.TrimPrefix(path, "code/")+`" . }}`) {
			t.Errorf("install.sql does not install %s", path)
		}
	}
	after := definitions(t, conn)
	for name, def := range before {
		if after[name] != def {
			t.Errorf("%s after migrate differs from its file:\n--- migrate\n%s\n--- file\n%s", name, def, after[name])
		}
	}
}
