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
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
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
	await := func(told *store.Call) (store.Call, *sdk.CallToolResult, error) {
		t.Helper()
		settled := make(chan *store.Call, 1)
		settled <- told
		c, res, joined, err := g.await(t.Context(), key, 1, settled, nil, true, time.Now().Add(time.Minute))
		if err == nil && !joined {
			t.Errorf("told %+v: answered as not joined; the call waited for its row", told)
		}
		return c, res, err
	}

	ok := &store.Call{Key: key, Status: outbox.StatusSucceeded, Response: json.RawMessage(`{"id": 7}`), Record: record}
	c, res, err := await(ok)
	if err != nil || c.Status != outbox.StatusSucceeded || string(c.Record) != string(record) {
		t.Fatalf("told a success with its record: %+v, %v; want that state, not read", c, err)
	}
	if res == nil {
		t.Fatal("told a success with its record: no result decoded from it; the answer would decode the record again")
	}
	got := answer(c, res, false, true)
	if got.IsError || got.StructuredContent == nil {
		t.Fatalf("the answer from the state told: %+v; want the tool's result", got)
	}
	// the same answer as one decoded from the record (a replay's)
	again, err := json.Marshal(answer(c, nil, false, true))
	if err != nil {
		t.Fatal(err)
	}
	if first, err := json.Marshal(got); err != nil || string(first) != string(again) {
		t.Fatalf("the answer from the result decoded once: %s (%v); from the record: %s", first, err, again)
	}

	for name, told := range map[string]*store.Call{
		"a failure":          {Key: key, Status: outbox.StatusFailed, Record: record},
		"a result too large": {Key: key, Status: outbox.StatusSucceeded, Record: json.RawMessage(`{"io.drainer/too_large": 20000000}`)},
		"a success without a record": {Key: key, Status: outbox.StatusSucceeded,
			Response: json.RawMessage(`{"id": 7}`)},
		"a record that is no result": {Key: key, Status: outbox.StatusSucceeded, Record: json.RawMessage(`{"content": 3}`)},
		"a wake-up alone":            nil,
	} {
		if c, _, err := await(told); !errors.Is(err, store.ErrNoCall) {
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

// TestAwaitWaitsForTheWriteItWasWokenBy: a bare notification of a row this
// call leased to the engine of this process, arriving while that engine
// writes the row's completion (Config.Writing), is taken for that write's
// own: the call waits for the write's news instead of reading the row,
// and reads it once the write ended without news that answers. Woken while
// no write of its row is under way, it reads at once. The key has no row
// (a read answers ErrNoCall), and the periodic read is an hour away, so
// each answer shows what the call did.
func TestAwaitWaitsForTheWriteItWasWokenBy(t *testing.T) {
	t.Parallel()
	const key, seq = "v1:no-such-row", int64(42)
	record := json.RawMessage(`{"content":[{"type":"text","text":"charged"}]}`)
	news := &store.Call{Key: key, Status: outbox.StatusSucceeded, Response: json.RawMessage(`{}`), Record: record}
	type waited struct {
		c   store.Call
		err error
	}
	start := func(writing func(int64) <-chan struct{}) (chan *store.Call, chan waited) {
		g := bareGateway(t)
		g.recheck = time.Hour
		g.cfg.Writing = writing
		settled := make(chan *store.Call, 1)
		settled <- nil // the notification
		done := make(chan waited, 1)
		go func() {
			c, _, _, err := g.await(t.Context(), key, seq, settled, nil, true, time.Now().Add(time.Hour))
			done <- waited{c, err}
		}()
		return settled, done
	}

	write := make(chan struct{})
	var asked []int64
	settled, done := start(func(s int64) <-chan struct{} { asked = append(asked, s); return write })
	settled <- news // taken once the notification was
	if got := <-done; got.err != nil || string(got.c.Record) != string(record) {
		t.Fatalf("woken during the write, then told its news: %+v, %v; want the news, the row not read", got.c, got.err)
	}
	if len(asked) != 1 || asked[0] != seq {
		t.Fatalf("asked the engine about rows %v; want the leased row %d once", asked, seq)
	}

	write = make(chan struct{})
	_, done = start(func(int64) <-chan struct{} { return write })
	select {
	case got := <-done:
		t.Fatalf("woken during the write: answered %+v, %v before the write ended; want the wait", got.c, got.err)
	case <-time.After(100 * time.Millisecond):
	}
	close(write) // ended without news (the row lost to its fence)
	if got := <-done; !errors.Is(got.err, store.ErrNoCall) {
		t.Fatalf("the write ended without news: %+v, %v; want the row read (ErrNoCall)", got.c, got.err)
	}

	_, done = start(func(int64) <-chan struct{} { return nil })
	if got := <-done; !errors.Is(got.err, store.ErrNoCall) {
		t.Fatalf("woken with no write of the row under way: %+v, %v; want the row read (ErrNoCall)", got.c, got.err)
	}
}
