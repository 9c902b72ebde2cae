package gateway

import (
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"golang.org/x/sync/semaphore"
)

// bareGateway is a gateway on a fresh database with none of its server:
// its calls' reads, waits and answers, for the tests of this package.
func bareGateway(t *testing.T) *Gateway {
	t.Helper()
	return &Gateway{cfg: Config{DB: storetest.NewPool(t), Store: store.MustNew(storetest.Schema)}, log: slog.New(slog.DiscardHandler),
		metrics: NewMetrics(nil, nil), closing: make(chan struct{}), answers: semaphore.NewWeighted(answerBudget)}
}

// TestAwaitAnswersFromTheStateItWasTold: a call whose row this process
// settled with a tool result is answered from the state the completion
// wrote, without reading the row back; told anything less (a failure,
// whose row holds what the completion did not know; a result too large to
// keep; a wake-up without a state), it reads the row. The key here has no
// row: a read answers ErrNoCall, so each answer shows whether it read.
func TestAwaitAnswersFromTheStateItWasTold(t *testing.T) {
	t.Parallel()
	g := bareGateway(t)
	const key = "v1:no-such-row"
	record := json.RawMessage(`{"content":[{"type":"text","text":"charged"}],"structuredContent":{"id":7}}`)
	await := func(told *store.Call) (store.Call, error) {
		t.Helper()
		settled := make(chan *store.Call, 1)
		settled <- told
		c, joined, err := g.await(t.Context(), key, settled, nil, true, false, time.Now().Add(time.Minute))
		if err == nil && !joined {
			t.Errorf("told %+v: answered as not joined; the call waited for its row", told)
		}
		return c, err
	}

	ok := &store.Call{Key: key, Status: outbox.StatusSucceeded, Response: json.RawMessage(`{"id": 7}`), Record: record}
	c, err := await(ok)
	if err != nil || c.Status != outbox.StatusSucceeded || string(c.Record) != string(record) {
		t.Fatalf("told a success with its record: %+v, %v; want that state, not read", c, err)
	}
	if got := answer(c, false, true); got.IsError || got.StructuredContent == nil {
		t.Fatalf("the answer from the state told: %+v; want the tool's result", got)
	}

	for name, told := range map[string]*store.Call{
		"a failure":          {Key: key, Status: outbox.StatusFailed, Record: record},
		"a result too large": {Key: key, Status: outbox.StatusSucceeded, Record: json.RawMessage(`{"io.drainer/too_large": 20000000}`)},
		"a success without a record": {Key: key, Status: outbox.StatusSucceeded,
			Response: json.RawMessage(`{"id": 7}`)},
		"a record that is no result": {Key: key, Status: outbox.StatusSucceeded, Record: json.RawMessage(`{"content": 3}`)},
		"a wake-up alone":            nil,
	} {
		if c, err := await(told); !errors.Is(err, store.ErrNoCall) {
			t.Errorf("told %s: %+v, %v; want the row read (ErrNoCall: it has none)", name, c, err)
		}
	}
}

// TestNewsReplacesABareWakeUp: a waiter woken by the settle notification
// and not yet running gets the state the engine of this process tells
// just after, in place of the bare wake-up; a bare wake-up never replaces
// a state.
func TestNewsReplacesABareWakeUp(t *testing.T) {
	w := newSettleWatch(nil, "c", slog.New(slog.DiscardHandler))
	ch, cancel := w.watch("k")
	defer cancel()
	state := &store.Call{Key: "k", Status: outbox.StatusSucceeded}
	w.wake("k", nil)
	w.wake("k", state)
	w.wake("k", nil)
	if got := <-ch; got != state {
		t.Fatalf("the waiter got %v; want the state told after the bare wake-up", got)
	}
	select {
	case got := <-ch:
		t.Fatalf("a second wake-up was held (%v); want one", got)
	default:
	}
}
