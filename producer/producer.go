package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/store"
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

func (in Intent) row() store.Intent {
	r := store.Intent{AgentRunID: in.AgentRunID, StepID: in.StepID, ToolName: in.ToolName,
		BusinessScope: in.BusinessScope, Payload: in.Payload}
	if in.Traceparent != "" {
		tp := in.Traceparent
		r.Traceparent = &tp
	}
	return r
}

// Producer enqueues intents into one schema.
type Producer struct {
	// Schema holds the outbox (default "drainer").
	Schema string
}

// EnqueueTx records an intent in the caller's transaction, so it commits (or
// rolls back) with the caller's state. Same tuple and payload as an existing
// row: the existing key with created = false. Same tuple, different payload:
// a *pgconn.PgError with code 23505 naming the key.
func EnqueueTx(ctx context.Context, tx pgx.Tx, in Intent) (key string, created bool, err error) {
	return Producer{}.EnqueueTx(ctx, tx, in)
}

// EnqueueBatchTx is EnqueueTx for many intents in one round trip.
func EnqueueBatchTx(ctx context.Context, tx pgx.Tx, ins []Intent) ([]Result, error) {
	return Producer{}.EnqueueBatchTx(ctx, tx, ins)
}

// Result is the answer for one intent of a batch.
type Result struct {
	Key     string
	Created bool
}

// EnqueueTx records an intent in the caller's transaction.
func (p Producer) EnqueueTx(ctx context.Context, tx pgx.Tx, in Intent) (key string, created bool, err error) {
	st, err := store.New(p.Schema)
	if err != nil {
		return "", false, err
	}
	if err := in.Validate(); err != nil {
		return "", false, fmt.Errorf("enqueue: %w", err)
	}
	e, err := st.Enqueue(ctx, tx, in.row())
	return e.Key, e.Created, err
}

// EnqueueBatchTx records many intents in the caller's transaction with one
// statement (and so one notification).
func (p Producer) EnqueueBatchTx(ctx context.Context, tx pgx.Tx, ins []Intent) ([]Result, error) {
	st, err := store.New(p.Schema)
	if err != nil {
		return nil, err
	}
	if len(ins) == 0 {
		return nil, nil
	}
	rows := make([]store.Intent, len(ins))
	for i, in := range ins {
		if err := in.Validate(); err != nil {
			return nil, fmt.Errorf("enqueue: intent %d: %w", i, err)
		}
		rows[i] = in.row()
	}
	got, err := st.EnqueueBatch(ctx, tx, rows)
	if err != nil {
		return nil, err
	}
	out := make([]Result, len(got))
	for i, e := range got {
		out[i] = Result{Key: e.Key, Created: e.Created}
	}
	return out, nil
}
