package drainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/migrations"
	"github.com/jackc/pgx/v5"
)

// DefaultMaxPayloadBytes is the default payload limit of enqueue (the SQL
// function reads the setting drainer.max_payload_bytes).
const DefaultMaxPayloadBytes = 1 << 20

// Intent is one "call this tool" request of an agent.
type Intent struct {
	idemkey.Tuple
	// Payload is the JSON body sent to the provider.
	Payload json.RawMessage
	// Traceparent optionally continues the agent's trace at dispatch.
	Traceparent string
	// ReadOnly marks a tool without side effects: it never needs an outbox
	// and is refused.
	ReadOnly bool
}

// Validate checks an intent before it reaches the database.
func (in Intent) Validate() error {
	var errs []error
	if err := in.Tuple.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch {
	case len(in.Payload) == 0:
		errs = append(errs, errors.New("payload must not be empty (use {} for none)"))
	case !json.Valid(in.Payload):
		errs = append(errs, errors.New("payload is not valid JSON"))
	case len(in.Payload) > DefaultMaxPayloadBytes*4:
		errs = append(errs, fmt.Errorf("payload is %d bytes, far above the limit", len(in.Payload)))
	}
	if in.ReadOnly {
		errs = append(errs, fmt.Errorf("tool %q is read_only: it has no side effect to make idempotent; call it directly instead of enqueueing it", in.ToolName))
	}
	return errors.Join(errs...)
}

// Producer enqueues intents into one schema.
type Producer struct {
	// Schema holds the outbox (default "drainer").
	Schema string
}

func (p Producer) schema() (string, error) {
	s := p.Schema
	if s == "" {
		s = migrations.DefaultSchema
	}
	return s, migrations.ValidateSchema(s)
}

// EnqueueTx records an intent in the caller's transaction, so it commits (or
// rolls back) with the caller's state. Same tuple and payload as an existing
// row: the existing key with created = false. Same tuple, different payload:
// a *pgconn.PgError with code 23505 naming the key.
func EnqueueTx(ctx context.Context, tx pgx.Tx, in Intent) (key string, created bool, err error) {
	return Producer{}.EnqueueTx(ctx, tx, in)
}

// EnqueueBatchTx is EnqueueTx for many intents in one round trip.
func EnqueueBatchTx(ctx context.Context, tx pgx.Tx, ins []Intent) ([]EnqueueResult, error) {
	return Producer{}.EnqueueBatchTx(ctx, tx, ins)
}

// EnqueueTx records an intent in the caller's transaction.
func (p Producer) EnqueueTx(ctx context.Context, tx pgx.Tx, in Intent) (key string, created bool, err error) {
	schema, err := p.schema()
	if err != nil {
		return "", false, err
	}
	if err := in.Validate(); err != nil {
		return "", false, fmt.Errorf("enqueue: %w", err)
	}
	err = tx.QueryRow(ctx, "SELECT key, created FROM "+schema+".enqueue($1, $2, $3, $4, $5::jsonb, $6)",
		in.AgentRunID, in.StepID, in.ToolName, in.BusinessScope, string(in.Payload), nullIfEmpty(in.Traceparent)).
		Scan(&key, &created)
	if err != nil {
		return "", false, fmt.Errorf("enqueue: %w", err)
	}
	return key, created, nil
}

// EnqueueResult is the answer for one intent of a batch.
type EnqueueResult struct {
	Key     string
	Created bool
}

// EnqueueBatchTx records many intents in the caller's transaction with one
// statement (and so one notification).
func (p Producer) EnqueueBatchTx(ctx context.Context, tx pgx.Tx, ins []Intent) ([]EnqueueResult, error) {
	schema, err := p.schema()
	if err != nil {
		return nil, err
	}
	if len(ins) == 0 {
		return nil, nil
	}
	n := len(ins)
	runs, steps, tools, scopes, payloads := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	traces := make([]*string, n)
	for i, in := range ins {
		if err := in.Validate(); err != nil {
			return nil, fmt.Errorf("enqueue: intent %d: %w", i, err)
		}
		runs[i], steps[i], tools[i], scopes[i], payloads[i] = in.AgentRunID, in.StepID, in.ToolName, in.BusinessScope, string(in.Payload)
		traces[i] = nullIfEmpty(in.Traceparent)
	}
	rows, err := tx.Query(ctx, `SELECT e.key, e.created
	   FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) WITH ORDINALITY
	        AS i(run, step, tool, scope, payload, trace, ord),
	        LATERAL `+schema+`.enqueue(i.run, i.step, i.tool, i.scope, i.payload::jsonb, i.trace) e
	  ORDER BY i.ord`, runs, steps, tools, scopes, payloads, traces)
	if err != nil {
		return nil, fmt.Errorf("enqueue batch: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (EnqueueResult, error) {
		var res EnqueueResult
		return res, r.Scan(&res.Key, &res.Created)
	})
	if err != nil {
		return nil, fmt.Errorf("enqueue batch: %w", err)
	}
	return out, nil
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
