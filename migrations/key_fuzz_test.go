package migrations_test

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5"
)

// FuzzKeySQL checks docs/reference.md §1 on arbitrary tuples: the SQL functions
// drainer.canonical_tuple and drainer.idempotency_key reproduce
// idemkey.Tuple.Canonical and Key byte for byte. Strings the database cannot
// hold (invalid UTF-8, NUL) are skipped; enqueue refuses them anyway. Longer
// or empty fields are kept: the key function accepts any strings. One
// database and one connection serve the whole fuzz process.
func FuzzKeySQL(f *testing.F) {
	for _, seed := range [][4]string{
		{"", "", "", ""},
		{"run-1", "charge", "charge_card", "invoice:42"},
		{`quote"back\slash`, "\b\f\n\r\t", "\x01\x1f\x7f", "/ <>&'"},
		{"\u2028\u2029", "\u00e9 é", "😀 \U0010FFFF", "\uFEFF\u200b"},
		{"\\u0000", `\"`, "\ufffd", "\u0085\u00a0"},
		{"日本語", "ß", "Ω≈ç√", "\u0301e"},
		{strings.Repeat("x", 1024), strings.Repeat("é", 513), "t", ""},
		{"{\"agent_run_id\":\"a\"}", ",", ":", "}"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbtest.NewDatabase(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := migrations.Migrate(ctx, conn, "drainer", nil); err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, run, step, tool, scope string) {
		for _, s := range []string{run, step, tool, scope} {
			if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
				return
			}
		}
		tup := idemkey.Tuple{AgentRunID: run, StepID: step, ToolName: tool, BusinessScope: scope}
		var canonical, key string
		err := conn.QueryRow(ctx, "SELECT drainer.canonical_tuple($1,$2,$3,$4), drainer.idempotency_key($1,$2,$3,$4)",
			run, step, tool, scope).Scan(&canonical, &key)
		if err != nil {
			t.Fatalf("tuple %q: %v", []string{run, step, tool, scope}, err)
		}
		if want := string(tup.Canonical()); canonical != want {
			t.Fatalf("tuple %q: SQL canonical\n %q\nGo canonical\n %q", []string{run, step, tool, scope}, canonical, want)
		}
		if want := tup.Key(); key != want {
			t.Fatalf("tuple %q: SQL key %s, Go key %s", []string{run, step, tool, scope}, key, want)
		}
	})
}
