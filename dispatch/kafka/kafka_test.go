package kafka

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/dispatch"
)

// TestRecordOnTheWire: one record per row, value = payload, key = business
// scope (the row key when the scope is empty), the idempotency headers and
// traceparent; the response says where it went.
func TestRecordOnTheWire(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a := newAdapter(t, c, Config{})
	m := newMessage("create_order", "order-42", `{"order_id":"42"}`)
	m.Traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	r := dispatchOnce(t, a, m)
	wantOutcome(t, "dispatch", r, dispatch.Success, ReasonAcknowledged)
	var resp struct {
		Topic     string `json:"topic"`
		Partition *int32 `json:"partition"`
		Offset    *int64 `json:"offset"`
	}
	if err := json.Unmarshal(r.Response, &resp); err != nil || resp.Topic != topicOrders || resp.Partition == nil || resp.Offset == nil {
		t.Fatalf("response %s: want topic, partition and offset (%v)", r.Response, err)
	}
	noScope := newMessage("create_order", "", `{"order_id":"43"}`)
	wantOutcome(t, "dispatch without scope", dispatchOnce(t, a, noScope), dispatch.Success, "")

	recs := readAll(t, c.ListenAddrs(), topicOrders)
	if len(recs) != 2 {
		t.Fatalf("topic holds %d records, want 2", len(recs))
	}
	got := recs[0]
	if string(got.Value) != string(m.Payload) || string(got.Key) != "order-42" || got.Offset != *resp.Offset || got.Partition != *resp.Partition {
		t.Errorf("record key %q value %q at %d/%d; want key order-42, the payload, at the response's place", got.Key, got.Value, got.Partition, got.Offset)
	}
	for name, want := range map[string]string{HeaderIdempotencyKey: m.Key, HeaderTuple: m.Tuple.Encoded(), HeaderTraceparent: m.Traceparent} {
		if h := header(got, name); h != want {
			t.Errorf("header %s = %q, want %q", name, h, want)
		}
	}
	if string(recs[1].Key) != noScope.Key {
		t.Errorf("record of a row without business scope has key %q, want the row key %q", recs[1].Key, noScope.Key)
	}
	if header(recs[1], HeaderTraceparent) != "" {
		t.Error("traceparent header on a row without one")
	}
}

// TestTopicTemplate: {tool_name} picks the topic per row; a tool name that
// makes an invalid topic is terminal, names the topic, and sends nothing.
func TestTopicTemplate(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfakeSeed("agents.create_order"))
	a := newAdapter(t, c, Config{Topic: "agents.{tool_name}"})
	r := dispatchOnce(t, a, newMessage("create_order", "s", `{}`))
	wantOutcome(t, "templated topic", r, dispatch.Success, "")
	if !strings.Contains(string(r.Response), `"agents.create_order"`) {
		t.Errorf("response %s does not name agents.create_order", r.Response)
	}
	for _, tool := range []string{"bad tool", "ship/order", strings.Repeat("x", 250), "ünïcode"} {
		r := dispatchOnce(t, a, newMessage(tool, "s", `{}`))
		wantOutcome(t, "tool "+tool, r, dispatch.Terminal, ReasonInvalidTopic)
		if !r.NotSent || !strings.Contains(r.Err.Error(), "agents.{tool_name}") {
			t.Errorf("tool %q: NotSent %v, err %v: want not sent and the template named", tool, r.NotSent, r.Err)
		}
	}
	if n := len(readAll(t, c.ListenAddrs(), "agents.create_order")); n != 1 {
		t.Errorf("topic holds %d records, want 1", n)
	}
}
