package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
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
	rec := &storetest.Recorder{}
	rows, err := st.ListRowSummaries(ctx, storetest.TracedPool(t, pool, rec), store.Filter{}, 0, 10)
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
	stmts := rec.Take()
	if len(stmts) == 0 {
		t.Fatal("no statement recorded")
	}
	if n := storetest.ReturnedBytes(t, pool, stmts); n > 4<<10 {
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
