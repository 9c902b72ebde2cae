package drainer

import (
	"context"
	"encoding/json"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// TestSettledTellsTheStateItWrote: the news of an announcing row that
// succeeded with a tool result carries the state its completion wrote,
// equal to what a read of the row finds afterwards (its status, its
// record byte for byte, its trace context, no last error; its response
// equal as JSON); the news of a row that failed, or succeeded without a
// record, carries its key alone.
func TestSettledTellsTheStateItWrote(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	st, err := store.New(storetest.Schema)
	if err != nil {
		t.Fatal(err)
	}
	record := json.RawMessage(`{"content":[{"type":"text","text":"charged"}],  "structuredContent":{"z":1,"a":[2, 3]}}`)
	results := map[string]dispatch.Result{
		"ok":      {Outcome: dispatch.Success, Status: 200, Response: json.RawMessage(`{"z":1,  "a":[2, 3]}`), Record: record},
		"bare":    {Outcome: dispatch.Success, Status: 200, Response: json.RawMessage(`{"done":true}`)},
		"refused": {Outcome: dispatch.Terminal, Status: 200, Reason: "tool_error", Record: record},
	}
	var mu sync.Mutex
	told := map[string]store.Settle{}
	adapters := map[string]dispatch.Adapter{}
	var routes []*Route
	for tool, res := range results {
		adapters[tool] = dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result { return res })
		routes = append(routes, &Route{Tool: tool, Announce: true})
	}
	startEngine(t, pool, testRouting(t, adapters, routes...), Config{Settled: func(rows []store.Settle) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range rows {
			told[r.Key] = r
		}
	}})
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	keys := map[string]string{}
	for tool := range results {
		keys[tool] = storetest.EnqueueIntents(t, pool, []store.Intent{{AgentRunID: "run-" + tool, StepID: "s",
			ToolName: tool, Payload: []byte(`{}`), Traceparent: &tp}})[0]
	}
	testkit.WaitFor(t, 30*time.Second, "every row's news", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(told) == len(results), ""
	})

	ok := told[keys["ok"]]
	read, err := st.Call(t.Context(), pool, keys["ok"], store.AllRecords)
	if err != nil {
		t.Fatal(err)
	}
	if !ok.Known || ok.Call.Status != read.Status || string(ok.Call.Record) != string(read.Record) ||
		ok.Call.Traceparent != read.Traceparent || read.LastError != "" || ok.Call.Key != read.Key {
		t.Fatalf("the news of a success with a record: %+v\nthe row read back: %+v\nwant the same state", ok, read)
	}
	var told1, read1 any
	if json.Unmarshal(ok.Call.Response, &told1) != nil || json.Unmarshal(read.Response, &read1) != nil ||
		!reflect.DeepEqual(told1, read1) {
		t.Fatalf("the news's response %s; the row's %s: want them equal as JSON", ok.Call.Response, read.Response)
	}
	for _, tool := range []string{"bare", "refused"} {
		if s := told[keys[tool]]; s.Known {
			t.Errorf("the news of %s carries a state (%+v); want its key alone: its row holds what its completion did not know", tool, s)
		}
	}
	if r, _ := st.Call(t.Context(), pool, keys["refused"], store.AllRecords); r.Status != outbox.StatusFailed {
		t.Fatalf("the refused row is %s, want failed", r.Status)
	}
}
