package ops

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.enqueue("r1", "charge", 3)
	b := e.enqueue("r2", "email", 2)
	e.set(a[1], "succeeded", 1)

	page, err := e.c.List(t.Context(), Filter{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Rows) != 2 || page.Rows[0].Key != a[0] || page.NextAfterSeq != page.Rows[1].Seq {
		t.Fatalf("first page = %d rows, next %d", len(page.Rows), page.NextAfterSeq)
	}
	page, err = e.c.List(t.Context(), Filter{AfterSeq: page.NextAfterSeq}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Rows) != 3 || page.NextAfterSeq != 0 {
		t.Fatalf("second page = %d rows, next %d; want 3, 0", len(page.Rows), page.NextAfterSeq)
	}

	for _, tc := range []struct {
		f    Filter
		want []string
	}{
		{Filter{Status: "succeeded"}, []string{a[1]}},
		{Filter{Run: "r2"}, b},
		{Filter{Tool: "charge", Status: "pending"}, []string{a[0], a[2]}},
		{Filter{OlderThan: time.Hour}, nil},
	} {
		page, err := e.c.List(t.Context(), tc.f, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range page.Rows {
			got = append(got, r.Key)
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("List(%+v) = %v, want %v", tc.f, got, tc.want)
		}
	}
	e.exec(`UPDATE drainer.outbox SET updated_at = now() - interval '2 hours' WHERE key = $1`, b[0])
	page, err = e.c.List(t.Context(), Filter{OlderThan: time.Hour}, 0)
	if err != nil || len(page.Rows) != 1 || page.Rows[0].Key != b[0] {
		t.Fatalf("older than 1h = %+v, %v; want only %s", page.Rows, err, b[0])
	}

	// The JSON uses the contract's column names.
	buf, err := json.Marshal(page.Rows[0])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"key", "seq", "agent_run_id", "step_id", "tool_name", "business_scope", "kind", "payload",
		"status", "attempts", "next_attempt_at", "last_error", "response", "response_status", "created_at", "updated_at",
		"last_problem", "forward_key", "leased_by", "lease_expires_at"} {
		if _, ok := m[k]; !ok {
			t.Errorf("row JSON lacks %q: %s", k, buf)
		}
	}

	if _, err := e.c.List(t.Context(), Filter{Status: "done"}, 0); err == nil || !strings.Contains(err.Error(), "compensation_failed") {
		t.Errorf("unknown status: err = %v, want one listing the statuses", err)
	}
}

func TestInspect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.enqueue("r1", "charge", 3)
	e.set(k[0], "succeeded", 1)
	e.set(k[1], "failed", 4) // aborts r1, cancels k[2]

	in, err := e.c.Inspect(t.Context(), k[1])
	if err != nil {
		t.Fatal(err)
	}
	if in.Status != "failed" || in.Row == nil || in.Attempts != 4 || string(in.Payload) != `{"i": 1}` {
		t.Fatalf("inspection = %+v", in)
	}
	if in.Saga == nil || in.Saga.AgentRunID != "r1" || in.Saga.ForwardFailed != 1 || in.Saga.ForwardCancelled != 1 {
		t.Fatalf("saga = %+v", in.Saga)
	}
	if len(in.RunRows) != 3 || in.RunRows[2].Status != "cancelled" {
		t.Fatalf("run rows = %+v", in.RunRows)
	}
	if len(in.Audit) != 2 || in.Audit[0].Event != "enqueued" || in.Audit[1].Event != "failed" {
		t.Fatalf("audit = %+v", in.Audit)
	}

	// A pruned key answers its final status from the tombstones.
	e.exec(`UPDATE drainer.keys k SET final_status = o.status, pruned_at = now() FROM drainer.outbox o WHERE o.key = k.key AND k.key = $1`, k[0])
	e.exec(`DELETE FROM drainer.outbox WHERE key = $1`, k[0])
	in, err = e.c.Inspect(t.Context(), k[0])
	if err != nil {
		t.Fatal(err)
	}
	if in.Status != "succeeded" || in.PrunedAt == nil || in.Row != nil {
		t.Fatalf("pruned inspection = %+v", in)
	}
	buf, _ := json.Marshal(in)
	if !strings.Contains(string(buf), `"status":"succeeded"`) || !strings.Contains(string(buf), `"pruned_at"`) {
		t.Errorf("pruned JSON = %s", buf)
	}

	_, err = e.c.Inspect(t.Context(), "idem_v1_nope")
	var nf *NotFoundError
	if !errors.As(err, &nf) || err.Error() != "no row with key idem_v1_nope" {
		t.Fatalf("unknown key: err = %v", err)
	}
}

// TestListSummariesPagesAsList: the table's list (no payload or response
// read) finds the rows List finds, page for page, filter for filter.
func TestListSummariesPagesAsList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.enqueue("r1", "charge", 3)
	e.enqueue("r2", "email", 2)
	e.set(a[1], "succeeded", 1)
	for _, tc := range []struct {
		f     Filter
		limit int
	}{
		{Filter{}, 2}, {Filter{AfterSeq: 2}, 10}, {Filter{Status: "succeeded"}, 0}, {Filter{Run: "r2"}, 1}, {Filter{Tool: "charge", Status: "pending"}, 0},
	} {
		full, err := e.c.List(t.Context(), tc.f, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		sum, err := e.c.ListSummaries(t.Context(), tc.f, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		var want, got []string
		for _, r := range full.Rows {
			want = append(want, r.Key+"/"+string(r.Status))
		}
		for _, r := range sum.Rows {
			got = append(got, r.Key+"/"+string(r.Status))
		}
		if strings.Join(got, ",") != strings.Join(want, ",") || sum.NextAfterSeq != full.NextAfterSeq {
			t.Errorf("ListSummaries(%+v, %d) = %v next %d; List gives %v next %d", tc.f, tc.limit, got, sum.NextAfterSeq, want, full.NextAfterSeq)
		}
	}
	if _, err := e.c.ListSummaries(t.Context(), Filter{Status: "done"}, 0); err == nil {
		t.Error("ListSummaries of an unknown status: no error")
	}
}
