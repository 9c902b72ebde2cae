package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestCountsByTopToolsIsBounded: with more tools than asked for, the work
// by tool names the n tools with the most work rows (ties by name), in
// tool then status order, counts every tool, and sums the others' rows by
// status; the totals are those of the unbounded CountsByTool.
func TestCountsByTopToolsIsBounded(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	ctx := context.Background()
	st := store.MustNew(storetest.Schema)
	const many = 150
	ins := make([]store.Intent, 0, many+5)
	for i := range many {
		ins = append(ins, store.Intent{AgentRunID: "run-many", StepID: fmt.Sprint("s", i), ToolName: fmt.Sprintf("tool-%03d", i), Payload: []byte(`{}`)})
	}
	for i := range 5 {
		ins = append(ins, store.Intent{AgentRunID: "run-many", StepID: fmt.Sprint("big-", i), ToolName: "zz-big", Payload: []byte(`{}`)})
	}
	storetest.EnqueueIntents(t, pool, ins)
	for i := range 2 {
		storetest.Insert(t, pool, storetest.Row{AgentRunID: "run-parked", StepID: fmt.Sprint("p", i), ToolName: "yy-parked", Status: outbox.StatusOutcomeUnknown})
		storetest.Insert(t, pool, storetest.Row{AgentRunID: "run-flight", StepID: fmt.Sprint("f", i), ToolName: "tool-149", Status: outbox.StatusInFlight})
	}
	storetest.Insert(t, pool, storetest.Row{AgentRunID: "run-done", ToolName: "done-tool", Status: outbox.StatusSucceeded})

	const n = 10
	got, err := st.CountsByTopTools(ctx, pool, n)
	if err != nil {
		t.Fatal(err)
	}
	// zz-big 5, tool-149 3, yy-parked 2, then the tools of one row by name.
	want := []store.ToolCount{
		{Tool: "tool-000", Status: outbox.StatusPending, Rows: 1}, {Tool: "tool-001", Status: outbox.StatusPending, Rows: 1},
		{Tool: "tool-002", Status: outbox.StatusPending, Rows: 1}, {Tool: "tool-003", Status: outbox.StatusPending, Rows: 1},
		{Tool: "tool-004", Status: outbox.StatusPending, Rows: 1}, {Tool: "tool-005", Status: outbox.StatusPending, Rows: 1},
		{Tool: "tool-006", Status: outbox.StatusPending, Rows: 1},
		{Tool: "tool-149", Status: outbox.StatusInFlight, Rows: 2}, {Tool: "tool-149", Status: outbox.StatusPending, Rows: 1},
		{Tool: "yy-parked", Status: outbox.StatusOutcomeUnknown, Rows: 2}, {Tool: "zz-big", Status: outbox.StatusPending, Rows: 5},
	}
	if fmt.Sprint(got.Top) != fmt.Sprint(want) {
		t.Errorf("top %d tools:\n got %v\nwant %v", n, got.Top, want)
	}
	if got.Tools != many+2 {
		t.Errorf("tools = %d, want %d", got.Tools, many+2)
	}
	if len(got.Other) != 1 || got.Other[outbox.StatusPending] != many-8 {
		t.Errorf("other tools' rows = %v, want %d pending", got.Other, many-8)
	}

	all, err := st.CountsByTool(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	total := map[outbox.Status]int64{}
	for _, tc := range all {
		total[tc.Status] += tc.Rows
	}
	for _, tc := range got.Top {
		total[tc.Status] -= tc.Rows
	}
	for s, v := range got.Other {
		total[s] -= v
	}
	for s, v := range total {
		if v != 0 {
			t.Errorf("%s: the bounded counts miss %d rows of CountsByTool's", s, v)
		}
	}

	// Fewer tools than n: every tool named, nothing left over.
	if got, err := st.CountsByTopTools(ctx, pool, 1000); err != nil || len(got.Other) != 0 || got.Tools != many+2 || len(got.Top) != len(all) {
		t.Errorf("n past the tools: %d rows (of %d), other %v, tools %d, err %v", len(got.Top), len(all), got.Other, got.Tools, err)
	}
}
