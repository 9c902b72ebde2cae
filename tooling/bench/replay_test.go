package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/tooling/dbtest"
)

// replayStatements reads replay.sql as psql would run it with -v
// rows=ROWS: its backslash commands dropped, one statement at a time (the
// procedures' bodies kept whole), so VACUUM runs outside a transaction.
func replayStatements(t *testing.T, rows string) []string {
	t.Helper()
	text, err := os.ReadFile("replay.sql")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var cur strings.Builder
	inBody := false
	for line := range strings.Lines(string(text)) {
		trimmed := strings.TrimSpace(line)
		if !inBody && (strings.HasPrefix(trimmed, `\`) || strings.HasPrefix(trimmed, "--") || trimmed == "") {
			continue
		}
		if strings.Count(line, "$$")%2 == 1 {
			inBody = !inBody
		}
		cur.WriteString(strings.ReplaceAll(line, ":rows", rows))
		if !inBody && strings.HasSuffix(trimmed, ";") {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	if strings.TrimSpace(cur.String()) != "" || inBody {
		t.Fatalf("replay.sql ends inside a statement: %q", cur.String())
	}
	return out
}

// TestReplayScriptRunsTheEnginesStatements: the in-server replay
// (replay.sql) still matches the schema: it fills the queue through
// enqueue_batch and the minimal table alike, its drain leaves every row
// succeeded with its completion audited and every chain whole, its
// ceiling drains the minimal table, and its rotation moves the drained
// generation out in moves of the size asked for.
func TestReplayScriptRunsTheEnginesStatements(t *testing.T) {
	url := dbtest.NewDatabase(t)
	conn := connect(t, url)
	if _, err := migrations.Migrate(t.Context(), conn, migrations.DefaultSchema, nil); err != nil {
		t.Fatal(err)
	}
	const rows = 2500 // more than one enqueue_batch call, not a multiple of it
	for range 2 {     // run again: the refill must start from empty tables
		for _, stmt := range replayStatements(t, "2500") {
			if _, err := conn.Exec(t.Context(), stmt); err != nil {
				t.Fatalf("replay.sql: %v\n%s", err, stmt)
			}
		}
		for _, proc := range []string{"drain", "ceiling"} {
			var n int64
			var seconds, wal float64
			if err := conn.QueryRow(t.Context(), "CALL replay."+proc+"(150, NULL, NULL, NULL)").Scan(&n, &seconds, &wal); err != nil {
				t.Fatalf("replay.%s: %v", proc, err)
			}
			if n != rows || seconds <= 0 || wal <= 0 {
				t.Errorf("replay.%s: %d rows in %v s, %v WAL bytes; want %d rows, positive time and WAL", proc, n, seconds, wal, rows)
			}
		}
	}
	var succeeded, entries, problems, minimal int
	if err := conn.QueryRow(t.Context(), `SELECT
	        (SELECT count(*) FROM drainer.outbox WHERE status = 'succeeded' AND attempts = 1 AND response_status = 200),
	        (SELECT count(*) FROM drainer.audit WHERE to_status = 'succeeded'),
	        (SELECT count(*) FROM drainer.audit_problems(NULL)),
	        (SELECT count(*) FROM replay.ceiling_outbox WHERE status = 'succeeded' AND attempts = 1)`).
		Scan(&succeeded, &entries, &problems, &minimal); err != nil {
		t.Fatal(err)
	}
	if succeeded != rows || entries != rows || problems != 0 || minimal != rows {
		t.Errorf("after the replay: %d rows succeeded, %d completions audited, %d chain problems, %d minimal rows succeeded; want %d, %d, 0, %d",
			succeeded, entries, problems, minimal, rows, rows, rows)
	}

	// The rotation: the drained generation closed, then moved out in
	// moves of 300 rows.
	var answer string
	if err := conn.QueryRow(t.Context(), `SELECT drainer.rotate_queue(1, 1, interval '1 hour', 5000, 5000)`).Scan(&answer); err != nil || answer != "flipped" {
		t.Fatalf("closing the drained generation: %q, %v", answer, err)
	}
	var moves, settled int
	var longest float64
	if err := conn.QueryRow(t.Context(), "CALL replay.rotate(300, NULL, NULL)").Scan(&moves, &longest); err != nil {
		t.Fatalf("replay.rotate: %v", err)
	}
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM drainer.queue WHERE gen = 0`).Scan(&settled); err != nil {
		t.Fatal(err)
	}
	if moves != (rows+299)/300 || longest <= 0 || settled != rows {
		t.Errorf("replay.rotate: %d moves, the longest %v ms, %d rows settled (gen 0); want %d moves, a positive time, %d rows",
			moves, longest, settled, (rows+299)/300, rows)
	}
}

// TestReplayCeilingTableIsTheBenchs: the replay's minimal table is the one
// bench measures its ceiling on (minimalTableSQL), column for column.
func TestReplayCeilingTableIsTheBenchs(t *testing.T) {
	text, err := os.ReadFile("replay.sql")
	if err != nil {
		t.Fatal(err)
	}
	squash := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	want := strings.NewReplacer("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ", "CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ").
		Replace(fmt.Sprintf(minimalTableSQL, "replay"))
	if !strings.Contains(squash(string(text)), squash(want)) {
		t.Errorf("replay.sql does not create the bench's minimal table; want\n%s", want)
	}
}
