package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
)

// DefaultMaxPayloadBytes is the default payload limit of enqueue (the SQL
// function reads the setting drainer.max_payload_bytes). The database
// measures the payload as jsonb renders it (payload::text: what is stored
// and sent), which adds a space after each comma and colon, so a compact
// payload a little under the limit may be refused. Validate refuses only a
// payload of more than 4 times this, which no setting is meant to allow.
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

// Validate checks an intent before it reaches the database: its tuple, and
// that its payload is JSON a jsonb column can store (valid UTF-8, no
// \u0000 escape, no unpaired UTF-16 surrogate escape) and not far above the
// size limit.
func (in Intent) Validate() error {
	var errs []error
	if err := in.Tuple.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch {
	case len(in.Payload) == 0:
		errs = append(errs, errors.New("payload must not be empty (use {} for none)"))
	case len(in.Payload) > DefaultMaxPayloadBytes*4:
		errs = append(errs, fmt.Errorf("payload is %d bytes, more than 4 times the default limit of %d bytes "+
			"(the database refuses a payload above the setting drainer.max_payload_bytes, default %d, "+
			"measured as jsonb renders it)", len(in.Payload), DefaultMaxPayloadBytes, DefaultMaxPayloadBytes))
	case !json.Valid(in.Payload):
		errs = append(errs, invalidJSON(in.Payload))
	case !utf8.Valid(in.Payload):
		errs = append(errs, fmt.Errorf("payload is not valid UTF-8 (byte offset %d), which PostgreSQL's jsonb cannot store",
			invalidUTF8(in.Payload)))
	default:
		if off, why := outbox.JSONBRefused(in.Payload); off >= 0 {
			errs = append(errs, fmt.Errorf("payload contains %s at byte offset %d, which PostgreSQL's jsonb cannot store", why, off))
		}
	}
	if in.ReadOnly {
		errs = append(errs, fmt.Errorf("tool %q is read_only: it has no side effect to make idempotent; call it directly instead of enqueueing it", in.ToolName))
	}
	return errors.Join(errs...)
}

// invalidUTF8 returns the offset of the first byte of b that is not valid
// UTF-8, or -1.
// invalidJSON says why a payload json.Valid refused is not taken: a syntax
// error at its byte offset, or a nesting deeper than Go's JSON reader
// follows (10,000 levels; drainer.enqueue itself takes what jsonb stores).
func invalidJSON(b []byte) error {
	var v any
	err := json.Unmarshal(b, &v)
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		if strings.Contains(se.Error(), "exceeded max depth") {
			return errors.New("payload is nested more than 10,000 levels deep, more than this library reads (drainer.enqueue takes what jsonb stores, about 14,000 at PostgreSQL's default max_stack_depth)")
		}
		return fmt.Errorf("payload is not valid JSON (byte offset %d): %v", se.Offset, se)
	}
	return fmt.Errorf("payload is not valid JSON: %v", err)
}

func invalidUTF8(b []byte) int {
	for off := 0; off < len(b); {
		r, n := utf8.DecodeRune(b[off:])
		if r == utf8.RuneError && n <= 1 {
			return off
		}
		off += n
	}
	return -1
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
// a *pgconn.PgError with code 23505 naming the key. Under REPEATABLE READ
// or SERIALIZABLE a concurrent enqueue of the same tuple may fail with
// 40001, and two transactions that enqueue the same tuples in several calls
// in different orders may deadlock, one failing with 40P01, at any
// isolation level: retry the transaction on either.
func EnqueueTx(ctx context.Context, tx pgx.Tx, in Intent) (key string, created bool, err error) {
	return Producer{}.EnqueueTx(ctx, tx, in)
}

// EnqueueBatchTx is EnqueueTx for many intents in one round trip. Rows get
// their seq in the order of ins; the keys are locked in key order, so two
// calls whose intents overlap, in whatever orders, never deadlock with
// each other.
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
			return nil, fmt.Errorf("enqueue: intent %d: %w", i+1, err) // from 1, as the database numbers them
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
