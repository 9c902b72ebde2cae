package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/gateway"
	"github.com/drainer-io/drainer/ops"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// conforming fails t unless a client that checks results against the
// tool's outputSchema, as the official TypeScript SDK's does, takes res: a
// result that is not isError must have structuredContent, and
// structuredContent must match the schema.
func conforming(t *testing.T, schema string, res *sdk.CallToolResult) {
	t.Helper()
	if res.StructuredContent == nil {
		if !res.IsError {
			t.Fatalf("a result of a tool with an outputSchema has no structuredContent and is not isError (a client throws): %.500s", body(t, res))
		}
		return
	}
	var s jsonschema.Schema
	if err := json.Unmarshal([]byte(schema), &s); err != nil {
		t.Fatal(err)
	}
	resolved, err := s.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if err := resolved.Validate(v); err != nil {
		t.Fatalf("structuredContent %.300s does not match the outputSchema: %v", b, err)
	}
}

// TestTooLargeResultOfATypedTool: the retry of a call whose result was too
// large to record, of a tool declaring an outputSchema, is one a client
// that checks the schema takes: with the result's structuredContent when
// it was small enough to keep (and _meta too_large), isError saying the
// call took effect when it was not. Before, the answer was text only and
// not isError, which the TypeScript SDK's client throws on.
func TestTooLargeResultOfATypedTool(t *testing.T) {
	t.Parallel()
	g := startGateway(t, 2*time.Minute)
	s := g.client(t, agentHeaders("run-typed"))
	first := call(t, s, "bigtyped", nil, nil)
	if first.IsError || len(text(first)) != bigResult {
		t.Fatalf("the call that waited: isError %v, %d bytes of text", first.IsError, len(text(first)))
	}
	conforming(t, typedSchema, first)
	retry := settledCall(t, s, "bigtyped", nil, nil)
	if retry.IsError || retry.Meta["io.drainer/too_large"] == nil || retry.Meta[gateway.MetaReplay] != true {
		t.Fatalf("the retry: %.500s %v; want the structured result, not isError, with too_large", body(t, retry), retry.Meta)
	}
	conforming(t, typedSchema, retry)
	if sc, _ := json.Marshal(retry.StructuredContent); string(sc) != `{"n":1,"ok":true}` {
		t.Fatalf("the retry's structuredContent %s; want the tool's {\"n\":1,\"ok\":true}", sc)
	}

	// Its structuredContent too large as well: isError, saying the call
	// took effect once.
	doc := call(t, s, "bigdoc", nil, nil)
	conforming(t, typedSchema, doc)
	again := settledCall(t, s, "bigdoc", nil, nil)
	conforming(t, typedSchema, again)
	if !again.IsError || !strings.Contains(text(again), "took effect once") || again.Meta["io.drainer/too_large"] == nil {
		t.Fatalf("the retry of a result whose structuredContent was not kept: %.500s %v", body(t, again), again.Meta)
	}
	for _, tool := range []string{"bigtyped", "bigdoc"} {
		if n := g.ts.count(g.ts.effects, tool); n != 1 {
			t.Fatalf("%s took effect %d times, want 1", tool, n)
		}
	}
}

// TestParkedCallAnswers: a call parked outcome_unknown is answered with a
// resolve command the CLI takes (--outcome succeeded or failed, which it
// requires for such a row); once an operator resolves it succeeded, a
// tool declaring an outputSchema is answered isError saying the call
// succeeded (drainer holds no structured result to give), one without is
// answered as before. Before, the command lacked --outcome, and the
// typed tool's answer was text only, not isError.
func TestParkedCallAnswers(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	typed := gateway.Tool{Name: "typed", Adapter: "tools",
		Definition: json.RawMessage(`{"name":"typed","inputSchema":{"type":"object"},"outputSchema":` + typedSchema + `}`)}
	d := newDirect(t, pool, gateway.Config{Wait: 300 * time.Millisecond}, typed)
	s := d.client(t, "run-parked")
	st, err := store.New(storetest.Schema)
	if err != nil {
		t.Fatal(err)
	}
	oc := ops.New(pool, st)
	for _, tool := range []string{"typed", "charge"} {
		res := call(t, s, tool, map[string]any{"amount": 1}, nil) // no engine: recorded, pending
		key, _ := res.Meta[gateway.MetaKey].(string)
		if _, err := pool.Exec(context.Background(), `UPDATE drainer.outbox SET status = 'outcome_unknown', attempts = 1,
			last_error = 'the answer was lost', updated_at = now() WHERE key = $1`, key); err != nil {
			t.Fatal(err)
		}
		parked := call(t, s, tool, map[string]any{"amount": 1}, nil)
		for _, cmd := range []string{
			fmt.Sprintf("`drainer resolve %s --outcome succeeded --note ...`", key),
			fmt.Sprintf("`drainer resolve %s --outcome failed --note ...`", key),
		} {
			if !parked.IsError || !strings.Contains(text(parked), cmd) {
				t.Fatalf("%s parked: %s; want isError naming %s", tool, text(parked), cmd)
			}
		}
		if _, err := oc.Resolve(context.Background(), key, ops.Resolution{Note: "charged at the provider", Outcome: outbox.StatusSucceeded},
			ops.Who{Actor: "test"}); err != nil {
			t.Fatal(err)
		}
		done := call(t, s, tool, map[string]any{"amount": 1}, nil)
		if done.Meta[gateway.MetaStatus] != "succeeded" || !strings.Contains(text(done), "succeeded") {
			t.Fatalf("%s resolved succeeded: %s %v", tool, text(done), done.Meta)
		}
		if tool == "typed" {
			conforming(t, typedSchema, done)
			if !done.IsError {
				t.Fatalf("typed resolved succeeded: %s; want isError (no structured result to give)", text(done))
			}
		} else if done.IsError {
			t.Fatalf("charge resolved succeeded: isError %s", text(done))
		}
	}
}
