package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// bigJSON is a JSON object of about size bytes that does not compress
// (random hex), so that its stored size is its size.
func bigJSON(seed uint64, size int) json.RawMessage {
	r := rand.New(rand.NewPCG(seed, seed))
	const hex = "0123456789abcdef"
	b := make([]byte, size)
	for i := range b {
		b[i] = hex[r.IntN(16)]
	}
	return json.RawMessage(fmt.Sprintf(`{"i":%d,"blob":"%s"}`, seed, b))
}

// statements keeps the statements a pool runs, with their arguments.
type statements struct {
	mu   sync.Mutex
	list []stmt
}

type stmt struct {
	sql  string
	args []any
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	s.list = append(s.list, stmt{d.SQL, d.Args})
	s.mu.Unlock()
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// tracedPool is a second pool on pool's database that records its
// statements in rec.
func tracedPool(t *testing.T, pool *pgxpool.Pool, rec *statements) *pgxpool.Pool {
	t.Helper()
	cfg := pool.Config().Copy()
	cfg.ConnConfig.Tracer = rec
	traced, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(traced.Close)
	return traced
}

// resultBytes runs rec's statements again on pool and returns the bytes of
// the values they return: what they carried from the database.
func resultBytes(t *testing.T, pool *pgxpool.Pool, rec *statements) int {
	t.Helper()
	rec.mu.Lock()
	list := rec.list
	rec.mu.Unlock()
	if len(list) == 0 {
		t.Fatal("no statement recorded")
	}
	n := 0
	for _, s := range list {
		rows, err := pool.Query(context.Background(), s.sql, s.args...)
		if err != nil {
			t.Fatalf("%s: %v", s.sql, err)
		}
		for rows.Next() {
			for _, v := range rows.RawValues() {
				n += len(v)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", s.sql, err)
		}
	}
	return n
}

// TestListRowSummariesReadNoPayload: a list reads its rows without their
// payloads and responses (each up to drainer.max_payload_bytes or an
// adapter's response_limit): its statement returns a few hundred bytes a
// row however large they are, RowSummary has no field that could hold
// them, and their stored sizes stand in for them. ReadRow still reads one
// row whole.
func TestListRowSummariesReadNoPayload(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	ctx := context.Background()
	st := store.MustNew(storetest.Schema)
	const size = 256 << 10
	var keys []string
	var payloads, responses []json.RawMessage
	for i := range 4 {
		r := storetest.Row{AgentRunID: "run-big", StepID: fmt.Sprint("s", i), ToolName: "big_tool", Payload: bigJSON(uint64(i), size)}
		if i%2 == 1 {
			r.Status, r.Response = outbox.StatusOutcomeUnknown, bigJSON(uint64(100+i), size)
		}
		keys = append(keys, storetest.Insert(t, pool, r))
		payloads, responses = append(payloads, r.Payload), append(responses, r.Response)
	}

	for i := range reflect.TypeFor[store.RowSummary]().NumField() {
		if f := reflect.TypeFor[store.RowSummary]().Field(i); f.Type.Kind() == reflect.Slice {
			t.Errorf("RowSummary.%s is a %s: a list holds no payload or response", f.Name, f.Type)
		}
	}
	rec := &statements{}
	rows, err := st.ListRowSummaries(ctx, tracedPool(t, pool, rec), store.Filter{}, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(keys) {
		t.Fatalf("%d rows, want %d", len(rows), len(keys))
	}
	for i, r := range rows {
		if r.Key != keys[i] || r.ToolName != "big_tool" || r.StepID != fmt.Sprint("s", i) {
			t.Errorf("row %d: %+v, want key %s", i, r, keys[i])
		}
		if r.PayloadStoredBytes == nil || *r.PayloadStoredBytes < size {
			t.Errorf("row %d: payload_stored_bytes %v, want at least %d", i, r.PayloadStoredBytes, size)
		}
		if (r.ResponseStoredBytes != nil) != (responses[i] != nil) || r.ResponseStoredBytes != nil && *r.ResponseStoredBytes < size {
			t.Errorf("row %d: response_stored_bytes %v with response of %d bytes", i, r.ResponseStoredBytes, len(responses[i]))
		}
	}
	if n := resultBytes(t, pool, rec); n > 4<<10 {
		t.Errorf("the list's statement returned %d bytes for %d rows of %d KiB payloads: it reads them", n, len(keys), size>>10)
	}
	// The filters apply as to ListRows.
	parked, err := st.ListRowSummaries(ctx, pool, store.Filter{Status: outbox.StatusOutcomeUnknown, Payload: json.RawMessage(`{"i":3}`)}, 0, 10)
	if err != nil || len(parked) != 1 || parked[0].Key != keys[3] {
		t.Errorf("outcome_unknown rows with payload {\"i\":3}: %+v, %v; want %s", parked, err, keys[3])
	}

	whole, err := st.ReadRow(ctx, pool, keys[1])
	if err != nil || whole == nil {
		t.Fatalf("ReadRow: %v, %v", whole, err)
	}
	if !sameJSON(t, whole.Payload, payloads[1]) || !sameJSON(t, whole.Response, responses[1]) {
		t.Errorf("ReadRow: payload of %d bytes and response of %d, want them whole (%d, %d)",
			len(whole.Payload), len(whole.Response), len(payloads[1]), len(responses[1]))
	}
}

func sameJSON(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		return false
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}
