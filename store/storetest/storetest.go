package storetest

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema is the schema the factory migrates and writes to.
const Schema = migrations.DefaultSchema

// NewPool returns a pool on a fresh database migrated to the latest schema;
// it is closed (and the database dropped) when t ends. The test binary's
// TestMain must call dbtest.Main.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := dbtest.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Migrate(ctx, conn, Schema, nil); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Enqueue enqueues n intents of tool in run (steps step-0 … step-n-1,
// payload {"i": N}) in one transaction, as an agent does, and returns
// their keys in order.
func Enqueue(t testing.TB, pool *pgxpool.Pool, run, tool string, n int) []string {
	t.Helper()
	ins := make([]store.Intent, n)
	for i := range ins {
		ins[i] = store.Intent{AgentRunID: run, StepID: "step-" + strconv.Itoa(i), ToolName: tool,
			Payload: []byte(`{"i":` + strconv.Itoa(i) + `}`)}
	}
	return EnqueueIntents(t, pool, ins)
}

// EnqueueIntents enqueues ins in one transaction with the statement the
// producer uses (store's EnqueueBatch: drainer.enqueue_batch, one
// notification), and returns their keys in order. Unlike the producer it
// does not validate them first: give valid intents.
func EnqueueIntents(t testing.TB, pool *pgxpool.Pool, ins []store.Intent) []string {
	t.Helper()
	st, err := store.New(Schema)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	err = pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		res, err := st.EnqueueBatch(context.Background(), tx, ins)
		for _, r := range res {
			keys = append(keys, r.Key)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// Row describes a row to insert. Zero fields take the defaults noted.
type Row struct {
	AgentRunID    string // "run"
	StepID        string // "step"
	ToolName      string // "tool"
	BusinessScope string
	Kind          outbox.Kind     // outbox.KindForward
	Payload       json.RawMessage // {}
	Status        outbox.Status   // outbox.StatusPending
	Attempts      int
	// DueIn places next_attempt_at relative to now (negative: overdue).
	DueIn time.Duration
	// NotBefore, when positive, sets the row's floor that far from now.
	NotBefore time.Duration
	// LeaseFor, for in_flight rows, is the lease left (default 30s;
	// negative: already expired). LeasedBy names the replica ("test").
	LeaseFor  time.Duration
	LeasedBy  string
	LastError string
	Response  json.RawMessage
	// ForwardKey links a compensation row to its forward row.
	ForwardKey string
	// UpdatedAgo moves updated_at that far into the past.
	UpdatedAgo time.Duration
}

// Insert inserts r whole and returns its key.
func Insert(t testing.TB, pool *pgxpool.Pool, r Row) string {
	t.Helper()
	r = withDefaults(r)
	key := idemkey.Tuple{AgentRunID: r.AgentRunID, StepID: r.StepID, ToolName: r.ToolName, BusinessScope: r.BusinessScope}.Key()
	var lease *string
	if r.Status == outbox.StatusInFlight {
		lease = &r.LeasedBy
	}
	_, err := pool.Exec(context.Background(), `
	    INSERT INTO `+Schema+`.outbox (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash,
	           status, attempts, next_attempt_at, not_before, first_attempt_at, lease_token, lease_expires_at, leased_by,
	           last_error, response, forward_key, updated_at)
	    VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, `+Schema+`.payload_hash($7::jsonb),
	           $8, $9, now() + $10 * interval '1 millisecond',
	           CASE WHEN $11 > 0 THEN now() + $11 * interval '1 millisecond' END,
	           CASE WHEN $9 > 0 THEN now() END,
	           CASE WHEN $12::text IS NOT NULL THEN gen_random_uuid() END,
	           CASE WHEN $12::text IS NOT NULL THEN now() + $13 * interval '1 millisecond' END, $12,
	           nullif($14, ''), $15::jsonb, nullif($16, ''), now() - $17 * interval '1 millisecond')`,
		key, r.AgentRunID, r.StepID, r.ToolName, r.BusinessScope, r.Kind, string(r.Payload),
		r.Status, r.Attempts, r.DueIn.Milliseconds(), r.NotBefore.Milliseconds(), lease, r.LeaseFor.Milliseconds(),
		r.LastError, nullJSON(r.Response), r.ForwardKey, r.UpdatedAgo.Milliseconds())
	if err != nil {
		t.Fatalf("insert row %+v: %v", r, err)
	}
	// The key space knows every key, as enqueue and the saga record them.
	if _, err := pool.Exec(context.Background(), `INSERT INTO `+Schema+`.keys (key, payload_hash)
	    SELECT key, payload_hash FROM `+Schema+`.outbox WHERE key = $1 ON CONFLICT (key) DO NOTHING`, key); err != nil {
		t.Fatalf("record key of row %+v: %v", r, err)
	}
	return key
}

func withDefaults(r Row) Row {
	if r.AgentRunID == "" {
		r.AgentRunID = "run"
	}
	if r.StepID == "" {
		r.StepID = "step"
	}
	if r.ToolName == "" {
		r.ToolName = "tool"
	}
	if r.Kind == "" {
		r.Kind = outbox.KindForward
	}
	if len(r.Payload) == 0 {
		r.Payload = json.RawMessage(`{}`)
	}
	if r.Status == "" {
		r.Status = outbox.StatusPending
	}
	if r.LeaseFor == 0 {
		r.LeaseFor = 30 * time.Second
	}
	if r.LeasedBy == "" {
		r.LeasedBy = "test"
	}
	if r.Status == outbox.StatusSucceeded && r.Response == nil {
		r.Response = json.RawMessage(`{}`)
	}
	return r
}

func nullJSON(b json.RawMessage) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// State is what tests read back of a row.
type State struct {
	Status         outbox.Status
	Attempts       int
	LastError      *string
	Response       []byte
	ResponseStatus *int
	// DueIn is next_attempt_at - now(); Floor is not_before - now() (0: none).
	DueIn, Floor time.Duration
}

// Get reads the row of key.
func Get(t testing.TB, pool *pgxpool.Pool, key string) State {
	t.Helper()
	var s State
	var due float64
	var floor *float64
	err := pool.QueryRow(context.Background(), `SELECT status, attempts, last_error, response, response_status,
	        extract(epoch FROM next_attempt_at - now())::float8, extract(epoch FROM not_before - now())::float8
	   FROM `+Schema+`.outbox WHERE key = $1`, key).
		Scan(&s.Status, &s.Attempts, &s.LastError, &s.Response, &s.ResponseStatus, &due, &floor)
	if err != nil {
		t.Fatalf("row %s: %v", key, err)
	}
	s.DueIn = time.Duration(due * float64(time.Second))
	if floor != nil {
		s.Floor = time.Duration(*floor * float64(time.Second))
	}
	return s
}

// CountByStatus counts the outbox rows by status.
func CountByStatus(t testing.TB, pool *pgxpool.Pool) map[outbox.Status]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT status, count(*) FROM "+Schema+".outbox GROUP BY status")
	if err != nil {
		t.Fatal(err)
	}
	out := map[outbox.Status]int{}
	var s outbox.Status
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&s, &n}, func() error { out[s] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// ListenWhileAsleep has a daemon asleep on pool (a seat of the wake gate
// taken and held for hold, given back when t ends), so that enqueues
// notify, and returns a connection listening on the outbox channel,
// released when t ends.
func ListenWhileAsleep(t testing.TB, pool *pgxpool.Pool, st *store.Store, hold time.Duration) *pgxpool.Conn {
	t.Helper()
	ctx := context.Background()
	listener, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(listener.Release)
	if _, err := listener.Exec(ctx, "LISTEN "+pgx.Identifier{st.OutboxChannel()}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	sleeper, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sleeper.Release)
	slot, err := st.TakeWakeSeat(ctx, sleeper.Conn())
	if err != nil || slot < 0 {
		t.Fatalf("wake seat: %d %v", slot, err)
	}
	if held, err := st.HoldWake(ctx, sleeper.Conn(), slot, hold); err != nil || !held {
		t.Fatalf("hold the wake gate: %v %v", held, err)
	}
	t.Cleanup(func() {
		if err := st.ReleaseWake(context.Background(), sleeper.Conn(), slot); err != nil {
			t.Error(err)
		}
	})
	return listener
}
