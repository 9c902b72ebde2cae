package migrations

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5"
)

// schemaFile is the current definition of every table of the schema,
// generated from a freshly migrated database by schemaText.
const schemaFile = "schema.sql"

var update = flag.Bool("update", false, "write schema.sql from a freshly migrated database")

// regenerate is how schema.sql is written again.
const regenerate = "go test ./migrations -run TestSchemaFileEqualsTheDatabase -update (make schema)"

// TestSchemaFileEqualsTheDatabase: schema.sql is what a freshly migrated
// database holds, so that it can be read instead of the numbered migrations.
// With -update it writes the file instead. It also renders a schema
// migrated under another name and finds the same definitions, so schema.sql
// describes every --schema.
func TestSchemaFileEqualsTheDatabase(t *testing.T) {
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
	got, err := schemaText(ctx, conn, DefaultSchema)
	if err != nil {
		t.Fatal(err)
	}
	checkRendersEveryObject(t, conn, DefaultSchema, got)

	if *update {
		if err := os.WriteFile(schemaFile, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", schemaFile)
	} else {
		want, err := os.ReadFile(schemaFile)
		if err != nil {
			t.Fatalf("%v: write it with %s", err, regenerate)
		}
		if string(want) != got {
			t.Errorf("migrations/%s differs from a freshly migrated database (- file, + database):\n%s\nIf the migrations are right, regenerate it: %s%s",
				schemaFile, lineDiff(string(want), got), regenerate, versionNote(string(want), got))
		}
	}

	// The same migrations under another schema name give the same
	// definitions, with that name.
	const other = "drainer_schema_file"
	if _, err := Migrate(ctx, conn, other, nil); err != nil {
		t.Fatal(err)
	}
	alt, err := schemaText(ctx, conn, other)
	if err != nil {
		t.Fatal(err)
	}
	if alt = strings.ReplaceAll(alt, other, DefaultSchema); alt != got {
		t.Errorf("schema %s, its name replaced by %s, differs from schema %s (- %s, + %s):\n%s",
			other, DefaultSchema, DefaultSchema, DefaultSchema, other, lineDiff(got, alt))
	}
}

// checkRendersEveryObject checks the rendering against the catalogs by a
// second route: every table, view, sequence, index, constraint and trigger
// of schema is named in text (an index or sequence that is part of a
// constraint or an identity column by its owner's definition).
func checkRendersEveryObject(t *testing.T, conn *pgx.Conn, schema, text string) {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
	    SELECT CASE c.relkind WHEN 'v' THEN 'CREATE VIEW ' WHEN 'S' THEN 'CREATE SEQUENCE ' ELSE 'CREATE TABLE ' END
	           || $1 || '.' || c.relname || ' '
	      FROM pg_class c
	     WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'p', 'v', 'S')
	       AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'i' AND d.classid = 'pg_class'::regclass)
	    UNION ALL
	    SELECT 'INDEX ' || c.relname || ' ON '
	      FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
	     WHERE c.relnamespace = $1::regnamespace
	       AND NOT EXISTS (SELECT FROM pg_constraint k WHERE k.conindid = c.oid AND k.conrelid = i.indrelid)
	    UNION ALL
	    SELECT 'CONSTRAINT ' || k.conname || ' '
	      FROM pg_constraint k
	     WHERE k.connamespace = $1::regnamespace AND k.conrelid <> 0 AND k.conparentid = 0
	       AND k.contype <> 'n'
	    UNION ALL
	    SELECT 'CREATE TRIGGER ' || g.tgname || ' '
	      FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
	     WHERE c.relnamespace = $1::regnamespace AND NOT g.tgisinternal`, schema)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 20 {
		t.Fatalf("schema %s holds only %d objects: %q", schema, len(names), names)
	}
	for _, name := range names {
		if !strings.Contains(text, name) {
			t.Errorf("the rendering of schema %s does not hold %q", schema, strings.TrimSpace(name))
		}
	}
}

// versionNote explains a difference in the PostgreSQL version line: the
// catalogs' text may differ between major versions.
func versionNote(file, db string) string {
	line := func(s string) string {
		for l := range strings.Lines(s) {
			if strings.HasPrefix(l, "-- Rendered by ") {
				return strings.TrimSpace(l)
			}
		}
		return ""
	}
	if a, b := line(file), line(db); a != b {
		return fmt.Sprintf("\nThe file says %q, the test server %q: the catalogs' text may differ between major versions; regenerate with the server the tests use by default.", a, b)
	}
	return ""
}

// lineDiff returns the lines of a and b that differ, with two lines of
// context, as "-" (only in a) and "+" (only in b), numbered by their
// line in a and in b.
func lineDiff(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	// lcs[i][j]: the longest common subsequence of x[i:] and y[j:].
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type op struct {
		kind byte // ' ', '-' or '+'
		i, j int  // line numbers in a and b (1-based)
		text string
	}
	var ops []op
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			ops = append(ops, op{' ', i + 1, j + 1, x[i]})
			i, j = i+1, j+1
		case i < len(x) && (j == len(y) || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, op{'-', i + 1, j + 1, x[i]})
			i++
		default:
			ops = append(ops, op{'+', i + 1, j + 1, y[j]})
			j++
		}
	}
	const around, limit = 2, 200
	var out []string
	last := -1
	for k, o := range ops {
		if o.kind == ' ' {
			continue
		}
		from := max(k-around, last+1)
		if last < 0 || from > last+1 {
			out = append(out, fmt.Sprintf("@@ line %d of the file, %d of the database", ops[from].i, ops[from].j))
		}
		for c := from; c < k; c++ {
			out = append(out, "  "+ops[c].text)
		}
		out = append(out, string(o.kind)+" "+o.text)
		last = k
		for c := k + 1; c < len(ops) && c <= k+around && ops[c].kind == ' '; c++ {
			out = append(out, "  "+ops[c].text)
			last = c
		}
		if len(out) > limit {
			out = append(out, "… (more differences)")
			break
		}
	}
	return strings.Join(out, "\n")
}

// TestLineDiff: the diff shows what changed, where, and nothing else.
func TestLineDiff(t *testing.T) {
	t.Parallel()
	a := "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\neleven\ntwelve"
	b := "one\ntwo\nthree\nFOUR\nfive\nsix\nseven\neight\nnine\nten\neleven\ntwelve\nthirteen"
	got := lineDiff(a, b)
	want := "@@ line 2 of the file, 2 of the database\n  two\n  three\n- four\n+ FOUR\n  five\n  six\n" +
		"@@ line 11 of the file, 11 of the database\n  eleven\n  twelve\n+ thirteen"
	if got != want {
		t.Errorf("lineDiff =\n%s\nwant\n%s", got, want)
	}
	if d := lineDiff(a, a); d != "" {
		t.Errorf("lineDiff of equal texts = %q", d)
	}
}

// schemaText renders the tables, views and sequences of schema from the
// catalogs (see schema.sql's header): one statement per object, each
// table's partitions, sequences, indexes and triggers after it, every list
// sorted by name. It fails on a kind of object it does not render, so that
// schema.sql never leaves one out.
func schemaText(ctx context.Context, conn *pgx.Conn, schema string) (string, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	// Every name outside pg_catalog is rendered with its schema.
	if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog"); err != nil {
		return "", err
	}
	if err := unrendered(ctx, tx, schema); err != nil {
		return "", err
	}
	cat, err := readCatalog(ctx, tx, schema)
	if err != nil {
		return "", err
	}
	var major int
	if err := tx.QueryRow(ctx, "SELECT current_setting('server_version_num')::int / 10000").Scan(&major); err != nil {
		return "", err
	}
	return cat.render(schema, major), nil
}

// unrendered returns an error naming the objects of schema that schemaText
// does not render.
func unrendered(ctx context.Context, tx pgx.Tx, schema string) error {
	rows, err := tx.Query(ctx, `
	    SELECT 'relation ' || relname || ' of relkind ' || relkind::text FROM pg_class
	     WHERE relnamespace = $1::regnamespace AND relkind NOT IN ('r', 'p', 'v', 'S', 'i', 'I')
	    UNION ALL
	    SELECT 'row level security on ' || relname FROM pg_class
	     WHERE relnamespace = $1::regnamespace AND (relrowsecurity OR relforcerowsecurity)
	    UNION ALL
	    SELECT 'table ' || c.relname || ' inheriting from ' || p.relname
	      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
	     WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
	    UNION ALL
	    SELECT 'type ' || t.typname FROM pg_type t
	     WHERE t.typnamespace = $1::regnamespace AND t.typrelid = 0
	       AND NOT EXISTS (SELECT FROM pg_type e WHERE e.typarray = t.oid)
	    UNION ALL
	    SELECT 'policy ' || p.polname FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid
	     WHERE c.relnamespace = $1::regnamespace
	    UNION ALL
	    SELECT 'rule ' || r.rulename FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class
	     WHERE c.relnamespace = $1::regnamespace AND r.rulename <> '_RETURN'
	    UNION ALL
	    SELECT 'column ' || c.relname || '.' || a.attname || ' with its own statistics target, storage, compression or n_distinct'
	      FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_type t ON t.oid = a.atttypid
	     WHERE c.relnamespace = $1::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
	       AND (coalesce(a.attstattarget::int, -1) >= 0 OR a.attstorage <> t.typstorage OR a.attcompression <> ''
	            OR EXISTS (SELECT FROM unnest(a.attoptions) o WHERE o LIKE 'n\_distinct%'))
	    UNION ALL
	    SELECT 'table ' || c.relname || ' with TOAST storage parameters, a replica identity, a CLUSTER index or another access method'
	      FROM pg_class c LEFT JOIN pg_class t ON t.oid = c.reltoastrelid
	     WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'p')
	       AND (t.reloptions IS NOT NULL OR c.relreplident <> 'd'
	            OR c.relam IS DISTINCT FROM (SELECT oid FROM pg_am WHERE amname = 'heap') AND c.relkind = 'r'
	            OR EXISTS (SELECT FROM pg_index i WHERE i.indrelid = c.oid AND i.indisclustered))
	    UNION ALL
	    SELECT 'statistics ' || stxname FROM pg_statistic_ext WHERE stxnamespace = $1::regnamespace
	    UNION ALL
	    SELECT 'operator ' || oprname FROM pg_operator WHERE oprnamespace = $1::regnamespace
	    UNION ALL
	    SELECT 'collation ' || collname FROM pg_collation WHERE collnamespace = $1::regnamespace
	    UNION ALL
	    SELECT 'text search configuration ' || cfgname FROM pg_ts_config WHERE cfgnamespace = $1::regnamespace
	    ORDER BY 1`, schema)
	if err != nil {
		return err
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(found) > 0 {
		return fmt.Errorf("schema %s holds objects schema.sql does not render yet (teach schemaText, schemafile_test.go): %s",
			schema, strings.Join(found, "; "))
	}
	return nil
}

type relation struct {
	oid              uint32
	name, kind       string // pg_class.relkind
	unlogged         bool
	options          []string
	parent, bound    string // a partition's parent and its FOR VALUES clause
	partKey, comment string
	viewDef          string

	columns     []column
	constraints []constraint
	indexes     []index
	triggers    []trigger
	sequences   []sequence // owned by one of its columns (not identities)
}

type column struct {
	name, typ, collation, def, comment string
	notNull                            bool
	identity, generated                string // pg_attribute.attidentity, attgenerated
	identitySeq                        *sequence
}

type constraint struct{ name, def string }

type index struct {
	name, def, parent string // parent: the partitioned index it is a partition of
}

type trigger struct{ name, def string }

type sequence struct {
	name, typ                      string
	start, inc, min, max, cache    int64
	cycle                          bool
	owner, ownerColumn, dependency string // dependency: "a" OWNED BY, "i" identity
}

type catalog struct {
	relations map[uint32]*relation
	sequences []sequence // owned by no column
	functions []string
}

// readCatalog reads what render needs, each list sorted by name.
func readCatalog(ctx context.Context, tx pgx.Tx, schema string) (*catalog, error) {
	cat := &catalog{relations: map[uint32]*relation{}}
	byName := map[string]*relation{}
	rows, err := tx.Query(ctx, `
	    SELECT c.oid, quote_ident(c.relname), c.relkind::text, c.relpersistence = 'u',
	           coalesce(c.reloptions, '{}'), coalesce(quote_ident(p.relname), ''),
	           coalesce(pg_get_expr(c.relpartbound, c.oid, true), ''),
	           CASE c.relkind WHEN 'p' THEN pg_get_partkeydef(c.oid) ELSE '' END,
	           coalesce(quote_literal(obj_description(c.oid, 'pg_class')), ''),
	           CASE c.relkind WHEN 'v' THEN pg_get_viewdef(c.oid, true) ELSE '' END
	      FROM pg_class c
	      LEFT JOIN pg_inherits i ON i.inhrelid = c.oid AND c.relispartition
	      LEFT JOIN pg_class p ON p.oid = i.inhparent
	     WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'p', 'v')
	     ORDER BY c.relname`, schema)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		r := &relation{}
		if err := rows.Scan(&r.oid, &r.name, &r.kind, &r.unlogged, &r.options, &r.parent, &r.bound,
			&r.partKey, &r.comment, &r.viewDef); err != nil {
			return nil, err
		}
		slices.Sort(r.options)
		cat.relations[r.oid] = r
		byName[r.name] = r
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}

	// Sequences: owned by a column (OWNED BY, or an identity's), or by none.
	rows, err = tx.Query(ctx, `
	    SELECT quote_ident(c.relname), format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement,
	           s.seqmin, s.seqmax, s.seqcache, s.seqcycle,
	           coalesce(quote_ident(o.relname), ''), coalesce(quote_ident(a.attname), ''), coalesce(d.deptype::text, '')
	      FROM pg_sequence s
	      JOIN pg_class c ON c.oid = s.seqrelid
	      LEFT JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = s.seqrelid
	           AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
	      LEFT JOIN pg_class o ON o.oid = d.refobjid
	      LEFT JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
	     WHERE c.relnamespace = $1::regnamespace
	     ORDER BY c.relname`, schema)
	if err != nil {
		return nil, err
	}
	identities := map[[2]string]*sequence{}
	for rows.Next() {
		var s sequence
		if err := rows.Scan(&s.name, &s.typ, &s.start, &s.inc, &s.min, &s.max, &s.cache, &s.cycle,
			&s.owner, &s.ownerColumn, &s.dependency); err != nil {
			return nil, err
		}
		switch owner := byName[s.owner]; {
		case s.dependency == "i":
			identities[[2]string{s.owner, s.ownerColumn}] = &s
		case owner != nil:
			owner.sequences = append(owner.sequences, s)
		default:
			cat.sequences = append(cat.sequences, s)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}

	rows, err = tx.Query(ctx, `
	    SELECT a.attrelid, quote_ident(a.attname), format_type(a.atttypid, a.atttypmod),
	           CASE WHEN a.attcollation <> t.typcollation THEN a.attcollation::regcollation::text ELSE '' END,
	           a.attnotnull, a.attidentity::text, a.attgenerated::text,
	           coalesce(pg_get_expr(d.adbin, d.adrelid, true), ''),
	           coalesce(quote_literal(col_description(a.attrelid, a.attnum)), '')
	      FROM pg_attribute a
	      JOIN pg_class c ON c.oid = a.attrelid
	      JOIN pg_type t ON t.oid = a.atttypid
	      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	     WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'p', 'v')
	       AND a.attnum > 0 AND NOT a.attisdropped
	     ORDER BY a.attrelid, a.attnum`, schema)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var rel uint32
		var c column
		if err := rows.Scan(&rel, &c.name, &c.typ, &c.collation, &c.notNull, &c.identity, &c.generated,
			&c.def, &c.comment); err != nil {
			return nil, err
		}
		r := cat.relations[rel]
		c.identitySeq = identities[[2]string{r.name, c.name}]
		r.columns = append(r.columns, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}

	// Constraints declared on the table itself: not those a partition
	// inherits or clones from its parent (the parent's show them), nor
	// NOT NULL (the columns show it).
	rows, err = tx.Query(ctx, `
	    SELECT conrelid, quote_ident(conname), pg_get_constraintdef(oid, true)
	      FROM pg_constraint
	     WHERE connamespace = $1::regnamespace AND conrelid <> 0 AND conislocal AND conparentid = 0
	       AND contype <> 'n'
	     ORDER BY conname`, schema)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var rel uint32
		var c constraint
		if err := rows.Scan(&rel, &c.name, &c.def); err != nil {
			return nil, err
		}
		cat.relations[rel].constraints = append(cat.relations[rel].constraints, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}

	// Indexes, but those of a constraint (the constraint shows them).
	rows, err = tx.Query(ctx, `
	    SELECT i.indrelid, quote_ident(c.relname), pg_get_indexdef(i.indexrelid, 0, true),
	           coalesce(quote_ident(p.relname), '')
	      FROM pg_index i
	      JOIN pg_class c ON c.oid = i.indexrelid
	      LEFT JOIN pg_inherits h ON h.inhrelid = i.indexrelid
	      LEFT JOIN pg_class p ON p.oid = h.inhparent
	     WHERE c.relnamespace = $1::regnamespace
	       AND NOT EXISTS (SELECT FROM pg_constraint k WHERE k.conindid = i.indexrelid AND k.conrelid = i.indrelid)
	     ORDER BY c.relname`, schema)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var rel uint32
		var ix index
		if err := rows.Scan(&rel, &ix.name, &ix.def, &ix.parent); err != nil {
			return nil, err
		}
		cat.relations[rel].indexes = append(cat.relations[rel].indexes, ix)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}

	// Triggers created on the table: not a partition's clones of its
	// parent's (the parent's show them), nor a constraint's.
	rows, err = tx.Query(ctx, `
	    SELECT g.tgrelid, quote_ident(g.tgname), pg_get_triggerdef(g.oid, true)
	      FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
	     WHERE c.relnamespace = $1::regnamespace AND NOT g.tgisinternal AND g.tgparentid = 0
	     ORDER BY g.tgname`, schema)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var rel uint32
		var g trigger
		if err := rows.Scan(&rel, &g.name, &g.def); err != nil {
			return nil, err
		}
		cat.relations[rel].triggers = append(cat.relations[rel].triggers, g)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}

	rows, err = tx.Query(ctx, `SELECT DISTINCT proname::text FROM pg_proc WHERE pronamespace = $1::regnamespace ORDER BY 1`, schema)
	if err != nil {
		return nil, err
	}
	if cat.functions, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, err
	}
	return cat, nil
}

// render writes the catalog as schema.sql.
func (cat *catalog) render(schema string, major int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `-- The current definition of every table of drainer's schema, as a freshly
-- migrated database holds it: each table with its columns and constraints,
-- then its owned sequences, indexes and triggers, then its partitions
-- (an index ON ONLY a partitioned table is the parent of its partitions'
-- indexes, listed with them); then the views and the other sequences;
-- every list sorted by name. The schema is %[1]s here; a daemon run with
-- --schema NAME has the same objects in schema NAME.
--
-- Generated from the catalogs: do not edit. TestSchemaFileEqualsTheDatabase
-- fails when this file and a freshly migrated database differ; after
-- changing the migrations, regenerate it with
--
--     make schema
--     (go test ./migrations -run TestSchemaFileEqualsTheDatabase -update)
--
-- Not applied: `+"`drainer migrate`"+` applies the numbered migrations
-- (migrations/0NN_*.sql), then installs migrations/code/. Functions are
-- only named here: each is defined in migrations/code/functions/, one file
-- each, as are the views (code/views/) and triggers (code/triggers/) shown
-- here as installed. Privileges are not shown (migrate grants to the roles
-- already granted, so they vary with the database).
-- Rendered by PostgreSQL %[2]d.
`, schema, major)

	var tables, views []*relation
	partitions := map[string][]*relation{}
	for _, r := range cat.relations {
		switch {
		case r.kind == "v":
			views = append(views, r)
		case r.parent != "":
			partitions[r.parent] = append(partitions[r.parent], r)
		default:
			tables = append(tables, r)
		}
	}
	byName := func(a, b *relation) int { return strings.Compare(a.name, b.name) }
	slices.SortFunc(tables, byName)
	slices.SortFunc(views, byName)
	parents := map[string]*relation{}
	for _, r := range cat.relations {
		parents[r.name] = r
	}

	section := func(title string) {
		fmt.Fprintf(&b, "\n\n-- %s\n-- %s\n", title, strings.Repeat("=", len(title)))
	}
	section("Tables")
	var table func(r *relation)
	table = func(r *relation) {
		kind := "table"
		switch {
		case r.parent != "":
			kind = "partition " + r.bound + " of " + schema + "." + r.parent
		case r.kind == "p":
			kind = "table partitioned by " + r.partKey
		}
		fmt.Fprintf(&b, "\n-- %s.%s: %s\n", schema, r.name, kind)
		b.WriteString(r.createTable(schema, parents[r.parent]))
		for _, s := range r.sequences {
			b.WriteString(s.create(schema))
		}
		for _, ix := range r.indexes {
			if ix.parent != "" {
				fmt.Fprintf(&b, "-- a partition of index %s.%s\n", schema, ix.parent)
			}
			b.WriteString(ix.def + ";\n")
		}
		for _, g := range r.triggers {
			b.WriteString(g.def + ";\n")
		}
		r.comments(&b, schema)
		parts := partitions[r.name]
		slices.SortFunc(parts, byName)
		for _, p := range parts {
			table(p)
		}
	}
	for _, r := range tables {
		table(r)
	}

	section("Views")
	for _, v := range views {
		fmt.Fprintf(&b, "\n-- %s.%s: view\n", schema, v.name)
		fmt.Fprintf(&b, "CREATE VIEW %s.%s%s AS\n%s\n", schema, v.name, withOptions(v.options), v.viewDef)
		for _, g := range v.triggers {
			b.WriteString(g.def + ";\n")
		}
		v.comments(&b, schema)
	}

	section("Sequences owned by no column")
	b.WriteString("\n")
	for _, s := range cat.sequences {
		b.WriteString(s.create(schema))
	}

	section("Functions (migrations/code/functions/<name>.sql)")
	b.WriteString("\n")
	line := "--"
	for _, f := range cat.functions {
		if len(line)+1+len(f) > 78 {
			b.WriteString(line + "\n")
			line = "--"
		}
		line += " " + f
	}
	b.WriteString(line + "\n")
	return b.String()
}

// createTable renders CREATE TABLE; a partition's columns are its parent's,
// so only where a column's default or NOT NULL is not the parent's is it
// listed.
func (r *relation) createTable(schema string, parent *relation) string {
	var items []string
	width := 0
	for _, c := range r.columns {
		width = max(width, len(c.name))
	}
	inherited := map[string]column{}
	if parent != nil {
		for _, c := range parent.columns {
			inherited[c.name] = c
		}
	}
	var notes []string
	for _, c := range r.columns {
		if parent == nil {
			items = append(items, fmt.Sprintf("    %-*s %s", width, c.name, c.definition(schema)))
			continue
		}
		p := inherited[c.name]
		var opts []string
		if c.def != p.def && c.def != "" {
			opts = append(opts, "DEFAULT "+c.def)
		}
		if c.def != p.def && c.def == "" {
			notes = append(notes, fmt.Sprintf("    -- %s: no default of its own (%s's applies only to rows written through it)", c.name, parent.name))
		}
		if c.notNull && !p.notNull {
			opts = append(opts, "NOT NULL")
		}
		if len(opts) > 0 {
			items = append(items, fmt.Sprintf("    %s WITH OPTIONS %s", c.name, strings.Join(opts, " ")))
		}
	}
	for _, k := range r.constraints {
		items = append(items, "    CONSTRAINT "+k.name+" "+k.def)
	}
	var b strings.Builder
	b.WriteString("CREATE ")
	if r.unlogged {
		b.WriteString("UNLOGGED ")
	}
	fmt.Fprintf(&b, "TABLE %s.%s", schema, r.name)
	if parent != nil {
		fmt.Fprintf(&b, " PARTITION OF %s.%s", schema, parent.name)
	}
	if len(items) > 0 || len(notes) > 0 || parent == nil {
		b.WriteString(" (\n")
		b.WriteString(strings.Join(items, ",\n"))
		if len(notes) > 0 {
			if len(items) > 0 {
				b.WriteString("\n")
			}
			b.WriteString(strings.Join(notes, "\n"))
		}
		b.WriteString("\n)")
	}
	if parent != nil {
		b.WriteString(" " + r.bound)
	}
	if r.kind == "p" {
		b.WriteString(" PARTITION BY " + r.partKey)
	}
	b.WriteString(withOptions(r.options) + ";\n")
	return b.String()
}

func (c column) definition(schema string) string {
	s := c.typ
	if c.collation != "" {
		s += " COLLATE " + c.collation
	}
	switch c.generated {
	case "s":
		s += " GENERATED ALWAYS AS (" + c.def + ") STORED"
	case "":
		if c.def != "" {
			s += " DEFAULT " + c.def
		}
	default:
		s += " GENERATED ALWAYS AS (" + c.def + ") /* attgenerated " + c.generated + " */"
	}
	switch c.identity {
	case "a":
		s += " GENERATED ALWAYS AS IDENTITY" + c.identitySeq.identityOptions(schema)
	case "d":
		s += " GENERATED BY DEFAULT AS IDENTITY" + c.identitySeq.identityOptions(schema)
	}
	if c.notNull && c.identity == "" {
		s += " NOT NULL"
	}
	return s
}

func (r *relation) comments(b *strings.Builder, schema string) {
	kind := "TABLE"
	if r.kind == "v" {
		kind = "VIEW"
	}
	if r.comment != "" {
		fmt.Fprintf(b, "COMMENT ON %s %s.%s IS %s;\n", kind, schema, r.name, r.comment)
	}
	for _, c := range r.columns {
		if c.comment != "" {
			fmt.Fprintf(b, "COMMENT ON COLUMN %s.%s.%s IS %s;\n", schema, r.name, c.name, c.comment)
		}
	}
}

func withOptions(options []string) string {
	if len(options) == 0 {
		return ""
	}
	return " WITH (" + strings.Join(options, ", ") + ")"
}

// options renders the sequence's parameters that are not the defaults.
func (s *sequence) options() []string {
	var typeMin, typeMax int64
	switch s.typ {
	case "smallint":
		typeMin, typeMax = -1<<15, 1<<15-1
	case "integer":
		typeMin, typeMax = -1<<31, 1<<31-1
	default:
		typeMin, typeMax = -1<<63, 1<<63-1
	}
	defMin, defMax := int64(1), typeMax
	if s.inc < 0 {
		defMin, defMax = typeMin, -1
	}
	defStart := defMin
	if s.inc < 0 {
		defStart = defMax
	}
	var opts []string
	if s.start != defStart {
		opts = append(opts, fmt.Sprintf("START WITH %d", s.start))
	}
	if s.inc != 1 {
		opts = append(opts, fmt.Sprintf("INCREMENT BY %d", s.inc))
	}
	if s.min != defMin {
		opts = append(opts, fmt.Sprintf("MINVALUE %d", s.min))
	}
	if s.max != defMax {
		opts = append(opts, fmt.Sprintf("MAXVALUE %d", s.max))
	}
	if s.cache != 1 {
		opts = append(opts, fmt.Sprintf("CACHE %d", s.cache))
	}
	if s.cycle {
		opts = append(opts, "CYCLE")
	}
	return opts
}

func (s *sequence) create(schema string) string {
	opts := append([]string{"AS " + s.typ}, s.options()...)
	if s.owner != "" {
		opts = append(opts, fmt.Sprintf("OWNED BY %s.%s.%s", schema, s.owner, s.ownerColumn))
	}
	return fmt.Sprintf("CREATE SEQUENCE %s.%s %s;\n", schema, s.name, strings.Join(opts, " "))
}

// identityOptions renders an identity column's sequence where it is not
// the default one.
func (s *sequence) identityOptions(schema string) string {
	if s == nil {
		return ""
	}
	opts := s.options()
	if s.name != s.owner+"_"+s.ownerColumn+"_seq" {
		opts = append([]string{"SEQUENCE NAME " + schema + "." + s.name}, opts...)
	}
	if len(opts) == 0 {
		return ""
	}
	return " (" + strings.Join(opts, " ") + ")"
}
