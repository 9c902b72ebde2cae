package drainer

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// TestInFlightBytesBounded: the payloads a replica holds in dispatch never
// sum to more than MaxInFlightBytes plus one row's (the first row of a claim
// always goes out), however many workers are free, and every row drains; a
// row larger than the bound still goes out. Before the bound, 256 workers
// took 256 rows of 900 kB at once: about 560 MiB held by one replica.
func TestInFlightBytesBounded(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	const rows, size, bound = 40, 20_000, 100_000
	var mu sync.Mutex
	var held, peak, peakRows, inRows int
	adapter := dispatch.AdapterFunc(func(ctx context.Context, m *dispatch.Message) dispatch.Result {
		mu.Lock()
		held += len(m.Payload)
		inRows++
		peak, peakRows = max(peak, held), max(peakRows, inRows)
		mu.Unlock()
		// each row is held a while, so that the rows a claim leases
		// together are held together
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
		mu.Lock()
		held -= len(m.Payload)
		inRows--
		mu.Unlock()
		return dispatch.Result{Outcome: dispatch.Success}
	})
	var ins []store.Intent
	for i := range rows {
		n := size
		if i == rows/2 {
			n = 3 * bound // one row larger than the bound
		}
		ins = append(ins, store.Intent{AgentRunID: "run-bytes", StepID: "s" + strconv.Itoa(i), ToolName: "big",
			Payload: []byte(`{"blob":"` + strings.Repeat("y", n) + `"}`)})
	}
	storetest.EnqueueIntents(t, pool, ins)
	e := startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"big": adapter}, &Route{Tool: "big"}),
		Config{Workers: 64, MaxInFlightBytes: bound})
	testkit.WaitFor(t, 60*time.Second, "every row succeeded", func() (bool, string) {
		n := countByStatus(t, pool)["succeeded"]
		return n == rows, strconv.Itoa(n) + " succeeded"
	})
	mu.Lock()
	defer mu.Unlock()
	t.Logf("at most %d bytes in %d rows held at once (bound %d, rows of %d bytes and one of %d)", peak, peakRows, bound, size, 3*bound)
	if peak > bound+3*bound {
		t.Fatalf("%d payload bytes held at once, want at most the bound (%d) plus one row", peak, bound)
	}
	if peakRows > bound/size+1 {
		t.Fatalf("%d rows of %d bytes held at once with a bound of %d bytes, want at most %d", peakRows, size, bound, bound/size+1)
	}
	if peakRows < 2 {
		t.Fatalf("at most %d row held at once: the bound should let %d through", peakRows, bound/size)
	}
	if got := e.inFlightBytes.Load(); got != 0 {
		t.Fatalf("%d bytes counted in flight after the drain, want 0", got)
	}
}
