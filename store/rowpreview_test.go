package store_test

import (
	"context"
	"testing"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestReadRowPreviewReadsToTheBound: the console's read of one row takes a
// payload and a response larger than its bound as their size and their
// first characters, never whole (its statements return a few times the
// bound however large they are), and smaller ones whole, as ReadRow does.
func TestReadRowPreviewReadsToTheBound(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	ctx := context.Background()
	st := store.MustNew(storetest.Schema)
	const size, limit = 512 << 10, 4 << 10
	big := storetest.Row{AgentRunID: "run-preview", StepID: "big", ToolName: "t", Payload: bigJSON(1, size),
		Status: outbox.StatusOutcomeUnknown, Response: bigJSON(2, size)}
	small := storetest.Row{AgentRunID: "run-preview", StepID: "small", ToolName: "t", Payload: bigJSON(3, 100)}
	bigKey, smallKey := storetest.Insert(t, pool, big), storetest.Insert(t, pool, small)

	rec := &storetest.Recorder{}
	row, p, err := st.ReadRowPreview(ctx, storetest.TracedPool(t, pool, rec), bigKey, limit)
	if err != nil || row == nil {
		t.Fatalf("ReadRowPreview(big) = %v, %v", row, err)
	}
	if row.Payload != nil || row.Response != nil {
		t.Errorf("a payload and response of %d KiB were read whole (%d, %d bytes); want nil beyond the bound", size>>10, len(row.Payload), len(row.Response))
	}
	if p.Payload == nil || len(*p.Payload) != limit || (*p.Payload)[:18] != `{"i": 1, "blob": "` || p.PayloadBytes < size {
		t.Errorf("payload preview: %d bytes of %d; want the first %d characters (as jsonb renders it) and its size", lenOf(p.Payload), p.PayloadBytes, limit)
	}
	if p.Response == nil || len(*p.Response) != limit || p.ResponseBytes < size {
		t.Errorf("response preview: %d bytes of %d; want the first %d characters and its size", lenOf(p.Response), p.ResponseBytes, limit)
	}
	if n := storetest.ReturnedBytes(t, pool, rec.Take()); n > 4*limit {
		t.Errorf("reading a row of %d KiB payload and response to a bound of %d KiB returned %d bytes", size>>10, limit>>10, n)
	}

	row, p, err = st.ReadRowPreview(ctx, pool, smallKey, limit)
	if err != nil || row == nil || row.Payload == nil || p.Payload != nil || p.PayloadBytes != len(row.Payload) || p.ResponseBytes != 0 {
		t.Errorf("ReadRowPreview(small) = %v, %+v, %v; want it whole, no preview", row, p, err)
	}
	if row, _, err := st.ReadRowPreview(ctx, pool, "idem_v1_none", limit); row != nil || err != nil {
		t.Errorf("ReadRowPreview(unknown) = %v, %v; want nil, nil", row, err)
	}
}

func lenOf(s *string) int {
	if s == nil {
		return 0
	}
	return len(*s)
}
