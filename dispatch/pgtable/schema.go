package pgtable

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RecipientTableDDL creates a recipient table; %s is the table's name, quoted
// (pgx.Identifier{"app", "effects"}.Sanitize()). received_at is optional; any
// further column needs a default or must allow NULL.
const RecipientTableDDL = `CREATE TABLE %s (
    key            text PRIMARY KEY,
    agent_run_id   text NOT NULL,
    step_id        text NOT NULL,
    tool_name      text NOT NULL,
    business_scope text NOT NULL,
    payload        jsonb NOT NULL,
    received_at    timestamptz NOT NULL DEFAULT now()
)`

// wantColumn is a column the adapter writes, with the types it accepts as
// format_type prints them.
type wantColumn struct {
	name  string
	types []string
}

// columns are the columns the adapter writes.
var columns = []wantColumn{
	{"key", []string{"text", "character varying"}},
	{"agent_run_id", []string{"text", "character varying"}},
	{"step_id", []string{"text", "character varying"}},
	{"tool_name", []string{"text", "character varying"}},
	{"business_scope", []string{"text", "character varying"}},
	{"payload", []string{"jsonb"}},
}

const (
	tableSQL = `SELECT c.oid, c.relkind::text, has_table_privilege(c.oid, 'INSERT'), has_table_privilege(c.oid, 'SELECT')
FROM pg_class c WHERE c.oid = to_regclass($1)`

	columnsSQL = `SELECT a.attname::text, format_type(a.atttypid, NULL), a.attnotnull,
       a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> ''
FROM pg_attribute a
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`

	// uniqueKeySQL: ON CONFLICT (key) needs a non-partial, immediate unique
	// index on exactly that column.
	uniqueKeySQL = `SELECT EXISTS (
  SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
  WHERE i.indrelid = $1 AND i.indisunique AND i.indimmediate AND i.indnkeyatts = 1
    AND i.indpred IS NULL AND i.indexprs IS NULL AND a.attname = 'key')`
)

// checkTable verifies that the recipient table exists and that the adapter
// can insert into it and read it back, and reports everything missing.
func checkTable(ctx context.Context, pool *pgxpool.Pool, table string) error {
	var (
		oid                  uint32
		kind                 string
		canInsert, canSelect bool
	)
	err := pool.QueryRow(ctx, tableSQL, table).Scan(&oid, &kind, &canInsert, &canSelect)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("table %s does not exist; create it (pgtable.RecipientTableDDL):\n%s", table, fmt.Sprintf(RecipientTableDDL, table))
	}
	if err != nil {
		return fmt.Errorf("look up table %s: %w", table, err)
	}
	if kind != "r" && kind != "p" {
		return fmt.Errorf("%s is not a table (pg_class.relkind %q)", table, kind)
	}
	var problems []string
	if !canInsert || !canSelect {
		problems = append(problems, "the connecting role needs INSERT and SELECT on it")
	}
	rows, err := pool.Query(ctx, columnsSQL, oid)
	if err != nil {
		return fmt.Errorf("read the columns of %s: %w", table, err)
	}
	type found struct {
		typ              string
		notNull, hasDflt bool
	}
	have := map[string]found{}
	var order []string
	for rows.Next() {
		var name string
		var c found
		if err := rows.Scan(&name, &c.typ, &c.notNull, &c.hasDflt); err != nil {
			rows.Close()
			return fmt.Errorf("read the columns of %s: %w", table, err)
		}
		have[name] = c
		order = append(order, name)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the columns of %s: %w", table, err)
	}
	var missing []string
	for _, want := range columns {
		c, ok := have[want.name]
		switch {
		case !ok:
			missing = append(missing, want.name)
		case !slices.Contains(want.types, c.typ):
			problems = append(problems, fmt.Sprintf("column %s is %s, want %s", want.name, c.typ, strings.Join(want.types, " or ")))
		}
	}
	if len(missing) > 0 {
		problems = append(problems, "missing columns "+strings.Join(missing, ", "))
	}
	for _, name := range order {
		written := slices.ContainsFunc(columns, func(w wantColumn) bool { return w.name == name })
		if c := have[name]; !written && c.notNull && !c.hasDflt {
			problems = append(problems, fmt.Sprintf("column %s is NOT NULL without a default, and the adapter does not fill it", name))
		}
	}
	if _, ok := have["key"]; ok {
		var unique bool
		if err := pool.QueryRow(ctx, uniqueKeySQL, oid).Scan(&unique); err != nil {
			return fmt.Errorf("read the indexes of %s: %w", table, err)
		}
		if !unique {
			problems = append(problems, "column key must be the primary key (or have a unique, non-deferrable index of its own)")
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("table %s cannot receive rows: %s", table, strings.Join(problems, "; "))
	}
	return nil
}
