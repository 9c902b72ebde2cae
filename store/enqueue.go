package store

import (
	"context"
	"fmt"

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

// EnqueueUnannounced records one intent as Enqueue does, in a transaction
// of its own, without the wake-up's notification (drainer.notify off): for
// a producer that hands its row to an engine itself (the MCP gateway:
// drainer.Engine.Take) and calls WakeAll when that engine did not take it.
// A notifying commit holds a server-wide lock until its WAL is flushed, so
// concurrent notifying producers commit one at a time; these do not.
func (s *Store) EnqueueUnannounced(ctx context.Context, db DB, in Intent) (Enqueued, error) {
	var e Enqueued
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SELECT set_config('drainer.notify', 'off', true)")
	b.Queue(s.sql("SELECT key, created FROM {s}.enqueue($1, $2, $3, $4, $5::jsonb, $6)"),
		in.AgentRunID, in.StepID, in.ToolName, in.BusinessScope, string(in.Payload), in.Traceparent).QueryRow(func(r pgx.Row) error {
		return r.Scan(&e.Key, &e.Created)
	})
	b.Queue("COMMIT")
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return Enqueued{}, fmt.Errorf("enqueue: %w", err)
	}
	return e, nil
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
