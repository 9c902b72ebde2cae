package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/jackc/pgx/v5"
)

// Intent is one row to enqueue, already validated by the caller.
type Intent struct {
	AgentRunID, StepID, ToolName, BusinessScope string
	Payload                                     []byte // JSON
	Traceparent                                 *string
}

// Enqueued is the answer of drainer.enqueue for one intent.
type Enqueued struct {
	Key     string
	Created bool
}

// Enqueue records one intent with drainer.enqueue, in the transaction of db.
func (s *Store) Enqueue(ctx context.Context, db DB, in Intent) (Enqueued, error) {
	var e Enqueued
	err := db.QueryRow(ctx, s.sql("SELECT key, created FROM {s}.enqueue($1, $2, $3, $4, $5::jsonb, $6)"),
		in.AgentRunID, in.StepID, in.ToolName, in.BusinessScope, string(in.Payload), in.Traceparent).Scan(&e.Key, &e.Created)
	if err != nil {
		return e, fmt.Errorf("enqueue: %w", err)
	}
	return e, nil
}

// EnqueueLeased records one intent as Enqueue does, in a transaction of
// its own, without the wake-up's notification (drainer.notify off: a
// notifying commit holds a server-wide lock until its WAL is flushed, so
// concurrent notifying producers commit one at a time), and, in the same
// transaction, leases the row of its key as ClaimKey does with c
// (the same checks, the same fence): one round trip and one commit where
// the two took two each. The MCP gateway records each call with it on
// behalf of the engine of its own process (drainer.Engine.Lease). The row
// is nil when it was not leased: another replica holds it, it is not due,
// its scope's order or its tool's deferral holds it back. The commit is
// durable whatever c.Durable says: the record must be on disk before
// anything is sent.
func (s *Store) EnqueueLeased(ctx context.Context, db DB, in Intent, c Claim) (Enqueued, *ClaimedRow, error) {
	got, err := s.EnqueueLeasedBatch(ctx, db, []LeaseRequest{{In: in, Claim: c}})
	if err != nil {
		return Enqueued{}, nil, err
	}
	return got[0].Enqueued, got[0].Row, nil
}

// LeaseRequest is one intent of EnqueueLeasedBatch and the claim of the
// engine that leases its row.
type LeaseRequest struct {
	In    Intent
	Claim Claim
}

// Leased is what EnqueueLeasedBatch did for one request: the enqueue's
// answer, and the row when it was leased (nil as for EnqueueLeased).
type Leased struct {
	Enqueued Enqueued
	Row      *ClaimedRow
}

// EnqueueLeasedBatch is EnqueueLeased for several requests in one
// transaction: one round trip and one durable commit for all of them (the
// gateway records the calls that arrive while a record is being written
// together; see gateway/record.go). Each request is enqueued and then
// leased in order, so a request for a key an earlier one of the batch
// recorded finds it recorded (Created false) and leased (Row nil). Any
// error (one intent refused, a lost connection) rolls all of them back:
// nothing was recorded, unless the commit itself was lost.
func (s *Store) EnqueueLeasedBatch(ctx context.Context, db DB, reqs []LeaseRequest) ([]Leased, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(enqueueLeasedSettings)
	for _, r := range reqs {
		in := r.In
		key := idemkey.Tuple{AgentRunID: in.AgentRunID, StepID: in.StepID, ToolName: in.ToolName, BusinessScope: in.BusinessScope}.Key()
		extra, counted, args := r.Claim.clauses([]any{key, r.Claim.Lease.Milliseconds(), r.Claim.Replica})
		b.Queue(s.sql("SELECT key, created FROM {s}.enqueue($1, $2, $3, $4, $5::jsonb, $6)"),
			in.AgentRunID, in.StepID, in.ToolName, in.BusinessScope, string(in.Payload), in.Traceparent)
		b.Queue(s.sql(strings.ReplaceAll(fmt.Sprintf(claimKeySQL, extra), "{counted}", counted)), args...)
	}
	b.Queue("COMMIT")
	br := db.SendBatch(ctx, b)
	defer br.Close()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("enqueue: %w", err)
		}
	}
	out := make([]Leased, len(reqs))
	for i := range reqs {
		e := &out[i].Enqueued
		if err := br.QueryRow().Scan(&e.Key, &e.Created); err != nil {
			return nil, fmt.Errorf("enqueue: %w", err)
		}
		got, err := readLeased(br)
		if err != nil {
			return nil, fmt.Errorf("enqueue: lease: %w", err)
		}
		if len(got.Rows) > 0 {
			out[i].Row = &got.Rows[0]
		}
	}
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("enqueue commit: %w", err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("enqueue: %w", err)
	}
	return out, nil
}

// WakeAll wakes every daemon that listens, as an enqueue's notification
// does, naming no position: each claims from the first due row.
func (s *Store) WakeAll(ctx context.Context, db DB) error {
	if _, err := db.Exec(ctx, "SELECT pg_notify($1, '')", s.OutboxChannel()); err != nil {
		return fmt.Errorf("wake: %w", err)
	}
	return nil
}

// enqueueBatchSQL records every intent with drainer.enqueue_batch
// (migrations/code/functions/enqueue_batch.sql): one INSERT, so one audit
// statement and one notification, answers in the intents' order.
const enqueueBatchSQL = `SELECT e.key, e.created
   FROM {s}.enqueue_batch($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]::jsonb[], $6::text[]) e
  ORDER BY e.ord`

// EnqueueBatch records many intents with one statement, in the transaction
// of db.
func (s *Store) EnqueueBatch(ctx context.Context, db DB, ins []Intent) ([]Enqueued, error) {
	n := len(ins)
	runs, steps, tools, scopes, payloads := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	traces := make([]*string, n)
	for i, in := range ins {
		runs[i], steps[i], tools[i], scopes[i], payloads[i] = in.AgentRunID, in.StepID, in.ToolName, in.BusinessScope, string(in.Payload)
		traces[i] = in.Traceparent
	}
	rows, err := db.Query(ctx, s.sql(enqueueBatchSQL), runs, steps, tools, scopes, payloads, traces)
	if err != nil {
		return nil, fmt.Errorf("enqueue batch: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Enqueued, error) {
		var e Enqueued
		return e, r.Scan(&e.Key, &e.Created)
	})
	if err != nil {
		return nil, fmt.Errorf("enqueue batch: %w", err)
	}
	return out, nil
}
