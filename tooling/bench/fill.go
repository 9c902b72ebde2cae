package bench

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strconv"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/jackc/pgx/v5"
)

// benchTool is the tool_name of every bench row; its route goes to the no-op adapter.
const benchTool = "bench_noop"

// fillChunk bounds the rows of one COPY statement (and so of one
// transaction).
const fillChunk = 50_000

// rowsPerRun groups the bench rows into agent runs of this many steps.
const rowsPerRun = 100

// fillColumns are the intent columns a fill writes; each intent's queue row
// takes its defaults (status pending, attempts 0, due now).
var fillColumns = []string{"key", "agent_run_id", "step_id", "tool_name", "business_scope", "kind", "payload", "payload_hash"}

// fill empties the outbox and COPYs n intents into it, each with the key
// and payload hash drainer.enqueue would have given it, queues each one
// pending with its payload's size as the enqueue records it (a row without
// one is a row from before migration 026, whose claim looks the size up in
// its intent), then settles the tables. The queue's insert triggers (audit)
// fire as for any insert.
func (r *runner) fill(ctx context.Context, n int) error {
	if err := r.reset(ctx); err != nil {
		return err
	}
	r.runSeq++
	prefix := "bench-" + strconv.Itoa(r.runSeq) + "-"
	begin := time.Now()
	for from := 0; from < n; from += fillChunk {
		src := &rowSource{prefix: prefix, next: from, end: min(from+fillChunk, n)}
		if _, err := r.admin.CopyFrom(ctx, pgx.Identifier{r.schema, "intents"}, fillColumns, src); err != nil {
			return fmt.Errorf("fill intents: %w", err)
		}
		_, err := r.admin.Exec(ctx, fmt.Sprintf(`INSERT INTO %[1]s.queue (seq, tool_name, business_scope, kind, payload_bytes)
		    SELECT i.seq, i.tool_name, i.business_scope, i.kind, pg_column_size(i.payload) FROM %[1]s.intents i
		     WHERE i.seq > (SELECT coalesce(max(q.seq), 0) FROM %[1]s.queue q) ORDER BY i.seq`, r.schema))
		if err != nil {
			return fmt.Errorf("fill queue: %w", err)
		}
		if n > fillChunk {
			r.logf("  filled %d of %d rows", min(from+fillChunk, n), n)
		}
	}
	if n >= 10*fillChunk {
		r.logf("  fill took %s", time.Since(begin).Round(100*time.Millisecond))
	}
	return r.settle(ctx, r.schema+".queue", r.schema+".intents", r.schema+".audit")
}

// rowSource generates rows [next, end) for CopyFrom one at a time, so a
// large fill needs no memory for its rows.
type rowSource struct {
	prefix    string
	next, end int
	row       [8]any
}

// Next implements pgx.CopyFromSource.
func (s *rowSource) Next() bool {
	if s.next >= s.end {
		return false
	}
	i := s.next
	s.next++
	t := idemkey.Tuple{
		AgentRunID: s.prefix + strconv.Itoa(i/rowsPerRun),
		StepID:     "step-" + strconv.Itoa(i),
		ToolName:   benchTool,
	}
	// jsonb prints {"n": 1} exactly so: the hash is that of drainer.payload_hash.
	payload := []byte(`{"n": ` + strconv.Itoa(i) + `}`)
	hash := sha256.Sum256(payload)
	s.row = [8]any{t.Key(), t.AgentRunID, t.StepID, t.ToolName, "", "forward", payload, hash[:]}
	return true
}

// Values implements pgx.CopyFromSource.
func (s *rowSource) Values() ([]any, error) { return s.row[:], nil }

// Err implements pgx.CopyFromSource.
func (s *rowSource) Err() error { return nil }
