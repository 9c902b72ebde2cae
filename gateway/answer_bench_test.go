package gateway

import (
	"encoding/json"
	"testing"

	"github.com/drainer-io/drainer/dispatch/mcp"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
)

// BenchmarkAnswerFromAnnouncement is what a call that waited for its row
// costs to answer once the settle announcement carried the row's whole
// result: the check that the announcement answers it (answersWhole), then
// the answer (respond).
func BenchmarkAnswerFromAnnouncement(b *testing.B) {
	rec := mcp.Record(json.RawMessage(`[{"type":"text","text":"charged 1,000 cents to cus_123 (ch_456)"}]`),
		json.RawMessage(`{"charge":"ch_456","amount":1000}`), false, 1<<20)
	c := store.Call{Key: "k1", Status: outbox.StatusSucceeded, Record: rec}
	g := &Gateway{}
	t := &Tool{Name: "charge"}
	b.ReportAllocs()
	for b.Loop() {
		res, whole := answersWhole(&c)
		if whole == false {
			b.Fatal("the announcement does not answer the call whole")
		}
		if got, _, _ := g.respond(t, c.Key, c, res, true, false, nil); got == nil || len(got.Content) != 1 {
			b.Fatalf("answer %+v", got)
		}
	}
}
