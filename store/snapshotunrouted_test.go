package store

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
)

// unroutedScanSQL is the unrouted tools' statement as it was, a pass over
// every pending row: what unroutedSQL must answer alike.
const unroutedScanSQL = `SELECT q.tool_name, count(*), extract(epoch FROM now() - min(i.created_at))::float8
      FROM drainer.queue q JOIN drainer.intents i ON i.seq = q.seq
     WHERE q.status = 'pending' AND NOT (q.tool_name = ANY($1))
     GROUP BY q.tool_name ORDER BY count(*) DESC, q.tool_name LIMIT $2`

// enqueueTool enqueues n pending rows of tool, in one run of its own.
func enqueueTool(t *testing.T, conn *pgx.Conn, tool string, n int) {
	t.Helper()
	if _, err := conn.Exec(t.Context(), `SELECT count(*) FROM drainer.enqueue_batch(
	        ARRAY(SELECT 'run-' || $2 FROM generate_series(1, $1)), ARRAY(SELECT 'step-' || g FROM generate_series(1, $1) g),
	        ARRAY(SELECT $2 FROM generate_series(1, $1)), ARRAY(SELECT '' FROM generate_series(1, $1)),
	        ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, $1) g))`, n, tool); err != nil {
		t.Fatal(err)
	}
}

// TestUnroutedToolsReadTheirRowsOnly: finding the unrouted tools reads
// about one row per tool of each generation, and the unrouted tools' own
// rows, however many pending rows the routed tools hold, whatever the
// statistics say: taken with the unrouted tool's rows there (a tool's rows
// are then half the queue's, planned for any tool) or before they came
// (all of it). Before, every pending row was read, every snapshot: 553 ms
// at 340,000 pending rows.
func TestUnroutedToolsReadTheirRowsOnly(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name          string
		analyzedAfter bool
	}{{"statistics with the unrouted rows", true}, {"statistics before the unrouted rows", false}} {
		t.Run(c.name, func(t *testing.T) {
			const pending, unrouted = 20000, 5
			read := unroutedReads(t, pending, unrouted, c.analyzedAfter)
			t.Logf("finding %d unrouted rows beside %d routed pending rows read %d queue rows and intents", unrouted, pending, read)
			if read > 100 {
				t.Fatalf("finding %d unrouted rows beside %d routed pending rows read %d queue rows and intents, want at most 100", unrouted, pending, read)
			}
		})
	}
}

// unroutedReads enqueues pending rows of the routed tool busy and
// unrouted of the tool ghost, analyzing the queue before ghost's rows or
// after, and returns the queue rows and intents unroutedTools read. No
// vacuum: every row an index-only scan returns is looked up in its table,
// and counted.
func unroutedReads(t *testing.T, pending, unrouted int, analyzedAfter bool) int64 {
	t.Helper()
	ctx := t.Context()
	conn, s := migratedConn(t)
	enqueueTool(t, conn, "busy", pending)
	if analyzedAfter {
		enqueueTool(t, conn, "ghost", unrouted)
	}
	if _, err := conn.Exec(ctx, `ANALYZE drainer.queue; ANALYZE drainer.intents`); err != nil {
		t.Fatal(err)
	}
	if !analyzedAfter {
		enqueueTool(t, conn, "ghost", unrouted)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	// every row read by this backend, none by a parallel worker, whose
	// reads pg_stat_xact_user_tables would not show
	if _, err := tx.Exec(ctx, `SET LOCAL max_parallel_workers_per_gather = 0`); err != nil {
		t.Fatal(err)
	}
	got, err := s.unroutedTools(ctx, tx, []string{"busy"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Tool != "ghost" || got[0].Rows != int64(unrouted) {
		t.Fatalf("unrouted tools %+v, want ghost's %d rows alone", got, unrouted)
	}
	var read int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)::bigint
	      FROM pg_stat_xact_user_tables
	     WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'drainer.queue'::regclass)
	        OR relid = 'drainer.intents'::regclass`).Scan(&read); err != nil {
		t.Fatal(err)
	}
	return read
}

// TestUnroutedToolsAnswer: the unrouted tools are those with pending rows
// in any generation and no route, with their pending rows alone counted,
// the most rows first, at most maxUnroutedTools of them: the answer of the
// pass over every pending row, the oldest rows' ages included.
// Routed tools, and tools whose rows are only in flight or settled, are
// not among them.
func TestUnroutedToolsAnswer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	conn, s := migratedConn(t)
	for tool, n := range map[string]int{"routed": 40, "ghost": 11, "adrift": 3, "lost": 2, "settled-only": 4, "flying": 2} {
		enqueueTool(t, conn, tool, n)
	}
	for _, stmt := range []string{
		// ghost: 6 pending (one moved to the second generation), 2 in flight, 3 settled
		`UPDATE drainer.queue SET status = 'in_flight', attempts = 1, lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 hour'
		  WHERE seq IN (SELECT seq FROM drainer.queue WHERE tool_name = 'ghost' ORDER BY seq LIMIT 2)
		     OR tool_name = 'flying'
		     OR seq IN (SELECT seq FROM drainer.queue WHERE tool_name = 'routed' ORDER BY seq LIMIT 2)`,
		`UPDATE drainer.queue SET status = 'succeeded', attempts = 1
		  WHERE seq IN (SELECT seq FROM drainer.queue WHERE tool_name = 'ghost' AND status = 'pending' ORDER BY seq LIMIT 2)
		     OR seq IN (SELECT seq FROM drainer.queue WHERE tool_name = 'settled-only' ORDER BY seq LIMIT 2)`,
		`UPDATE drainer.queue SET status = 'cancelled', cancel_cause = 'test'
		  WHERE seq IN (SELECT seq FROM drainer.queue WHERE tool_name = 'ghost' AND status = 'pending' ORDER BY seq LIMIT 1)
		     OR (tool_name = 'settled-only' AND status = 'pending')`,
		`UPDATE drainer.queue SET gen = 2 WHERE seq = (SELECT max(seq) FROM drainer.queue WHERE tool_name = 'ghost' AND status = 'pending')`,
		// adrift, the first tool by name: its rows out of the current generation, one
		// pending among the settled ones (a requeued row of a generation moved out)
		`UPDATE drainer.queue SET gen = 2 WHERE tool_name = 'adrift'`,
		`UPDATE drainer.queue SET gen = 0 WHERE seq = (SELECT min(seq) FROM drainer.queue WHERE tool_name = 'adrift')`,
		// lost: its rows in the third generation alone
		`UPDATE drainer.queue SET gen = 3 WHERE tool_name = 'lost'`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if gens := scalarOf[int64](t, conn, `SELECT count(DISTINCT gen) FROM drainer.queue WHERE status = 'pending'`); gens != 4 {
		t.Fatalf("pending rows in %d generations, want 4", gens)
	}
	routed := []string{"routed", "nowhere"}
	assertUnrouted(t, conn, s, routed, []UnroutedTool{{Tool: "ghost", Rows: 6}, {Tool: "adrift", Rows: 3}, {Tool: "lost", Rows: 2}})

	if _, err := s.RefreshSnapshot(ctx, conn, 0, routed); err != nil {
		t.Fatal(err)
	}
	snap, ok, err := s.ReadSnapshot(ctx, conn)
	if err != nil || !ok {
		t.Fatalf("ReadSnapshot: %v, %v", ok, err)
	}
	if tools := toolRows(snap.Stats.Unrouted); !slices.Equal(tools, []UnroutedTool{{Tool: "ghost", Rows: 6}, {Tool: "adrift", Rows: 3}, {Tool: "lost", Rows: 2}}) {
		t.Fatalf("the snapshot's unrouted tools %+v, want ghost's 6 rows, adrift's 3 and lost's 2", snap.Stats.Unrouted)
	}

	// more unrouted tools than the gauges keep: the largest
	var want []UnroutedTool
	for i := range maxUnroutedTools + 2 {
		tool := "many-" + string(rune('a'+i))
		enqueueTool(t, conn, tool, 7+i)
		want = append(want, UnroutedTool{Tool: tool, Rows: int64(7 + i)})
	}
	slices.Reverse(want)
	assertUnrouted(t, conn, s, routed, want[:maxUnroutedTools])
	assertUnrouted(t, conn, s, nil, append([]UnroutedTool{{Tool: "routed", Rows: 38}}, want[:maxUnroutedTools-1]...))
}

// assertUnrouted checks unroutedTools' answer against want (tools and
// rows) and against the pass over every pending row, ages included, in
// one transaction (one now()).
func assertUnrouted(t *testing.T, conn *pgx.Conn, s *Store, routed []string, want []UnroutedTool) {
	t.Helper()
	ctx := t.Context()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	got, err := s.unroutedTools(ctx, tx, nonNil(routed))
	if err != nil {
		t.Fatal(err)
	}
	if tools := toolRows(got); !slices.Equal(tools, want) {
		t.Fatalf("unrouted tools %+v, want %+v", got, want)
	}
	rows, err := tx.Query(ctx, unroutedScanSQL, nonNil(routed), maxUnroutedTools)
	if err != nil {
		t.Fatal(err)
	}
	var scan []UnroutedTool
	var u UnroutedTool
	if _, err := pgx.ForEachRow(rows, []any{&u.Tool, &u.Rows, &u.OldestAge}, func() error {
		scan = append(scan, u)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, scan) {
		t.Fatalf("unrouted tools %+v, the pass over every pending row %+v", got, scan)
	}
	for _, u := range got {
		if u.OldestAge < 0 {
			t.Fatalf("unrouted tool %s: oldest age %v", u.Tool, u.OldestAge)
		}
	}
}

// toolRows is us without the ages.
func toolRows(us []UnroutedTool) []UnroutedTool {
	out := make([]UnroutedTool, len(us))
	for i, u := range us {
		out[i] = UnroutedTool{Tool: u.Tool, Rows: u.Rows}
	}
	return out
}

func scalarOf[T any](t *testing.T, conn *pgx.Conn, sql string) T {
	t.Helper()
	var v T
	if err := conn.QueryRow(t.Context(), sql).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}
