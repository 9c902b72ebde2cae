package webhook

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/dispatch"
)

// TestKeyPlacementOnTheWire sends one row per placement, set on the adapter
// and as a per-tool override, and checks where the provider found the key.
func TestKeyPlacementOnTheWire(t *testing.T) {
	for _, tc := range []struct {
		name    string
		adapter KeyPlacement
		tool    map[string]KeyPlacement
		where   string // header, query or body
		field   string
	}{
		{name: "default", where: "header", field: "Idempotency-Key"},
		{name: "adapter header", adapter: KeyPlacement{Name: "X-Request-Key", Location: LocationHeader}, where: "header", field: "X-Request-Key"},
		{name: "adapter query", adapter: KeyPlacement{Name: "idem", Location: LocationQuery}, where: "query", field: "idem"},
		{name: "adapter body", adapter: KeyPlacement{Name: "idempotency_key", Location: LocationBody}, where: "body", field: "idempotency_key"},
		{name: "route header over adapter query", adapter: KeyPlacement{Name: "idem", Location: LocationQuery},
			tool: map[string]KeyPlacement{"charge_card": {Name: "X-Idem", Location: LocationHeader}}, where: "header", field: "X-Idem"},
		{name: "route query over default", tool: map[string]KeyPlacement{"charge_card": {Name: "key", Location: LocationQuery}}, where: "query", field: "key"},
		{name: "route body over adapter header", adapter: KeyPlacement{Name: "X-Request-Key", Location: LocationHeader},
			tool: map[string]KeyPlacement{"charge_card": {Name: "request_id", Location: LocationBody}}, where: "body", field: "request_id"},
		{name: "other tool's override ignored", adapter: KeyPlacement{Name: "idem", Location: LocationQuery},
			tool: map[string]KeyPlacement{"refund_card": {Name: "request_id", Location: LocationBody}}, where: "query", field: "idem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProvider(t, func(*http.Request) answer { return answer{status: 200, body: `{}`} })
			a := newTestAdapter(t, p.srv.URL, func(c *Config) { c.KeyPlacement, c.ToolKeyPlacement = tc.adapter, tc.tool })
			m := testMessage(testPayload)
			if r := a.Dispatch(t.Context(), m); r.Outcome != dispatch.Success {
				t.Fatalf("outcome %v, err %v", r.Outcome, r.Err)
			}
			reqs := p.seen()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			got := reqs[0]
			u, err := url.Parse(got.uri)
			if err != nil {
				t.Fatal(err)
			}
			var body map[string]any
			if err := json.Unmarshal(got.body, &body); err != nil {
				t.Fatalf("body is not JSON: %v", err)
			}
			switch tc.where {
			case "header":
				if v := got.header.Get(tc.field); v != m.Key {
					t.Errorf("header %s = %q, want the key", tc.field, v)
				}
			case "query":
				if v := u.Query().Get(tc.field); v != m.Key {
					t.Errorf("query %s = %q, want the key", tc.field, v)
				}
				if u.Query().Get("sig") != querySecret {
					t.Errorf("configured query lost: %s", u.RawQuery)
				}
			case "body":
				if v := body[tc.field]; v != m.Key {
					t.Errorf("body field %s = %v, want the key", tc.field, v)
				}
			}
			// The key is nowhere else.
			if tc.where != "header" || tc.field != "Idempotency-Key" {
				if v := got.header.Get("Idempotency-Key"); v != "" {
					t.Errorf("Idempotency-Key header also sent: %q", v)
				}
			}
			if tc.where != "query" && strings.Contains(got.uri, m.Key) {
				t.Errorf("key in the URL: %s", got.uri)
			}
			if tc.where != "body" {
				if string(got.body) != testPayload {
					t.Errorf("body changed: %s", got.body)
				}
			} else if body["amount"] != float64(500) || body["note"] != payloadSecret || len(body) != 4 {
				t.Errorf("payload fields not kept: %s", got.body)
			}
			if got.header.Get("X-Agent-Idempotency-Tuple") != m.Tuple.Encoded() {
				t.Errorf("X-Agent-Idempotency-Tuple missing or wrong")
			}
		})
	}
}

// TestKeyPlacementBodyRefusals: a payload the route's body key placement
// cannot carry (no JSON object, the field taken by another value) is
// refused before anything is sent, as unsendable, so the engine fails the
// row without consuming an attempt (docs/reference.md §2: an attempt is
// one that may have reached the provider); a payload already carrying the
// key is sent unchanged.
func TestKeyPlacementBodyRefusals(t *testing.T) {
	p := newProvider(t, func(*http.Request) answer { return answer{status: 200, body: `{}`} })
	a := newTestAdapter(t, p.srv.URL, func(c *Config) {
		c.KeyPlacement = KeyPlacement{Name: "idem", Location: LocationBody}
	})
	key := testMessage(testPayload).Key
	for _, tc := range []struct {
		name, payload, want string
	}{
		{"array", `["` + payloadSecret + `"]`, "not a JSON object"},
		{"string", `"` + payloadSecret + `"`, "not a JSON object"},
		{"null", `null`, "not a JSON object"},
		{"field with another value", `{"idem":"` + payloadSecret + `"}`, `field "idem"`},
		{"field with a non-string", `{"idem":7}`, `field "idem"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := a.Dispatch(t.Context(), testMessage(tc.payload))
			if r.Outcome != dispatch.Terminal || !r.NotSent || r.Reason != dispatch.ReasonUnsendable {
				t.Fatalf("outcome %v (not sent %v, reason %q), want Terminal before sending, unsendable: the row fails without consuming an attempt",
					r.Outcome, r.NotSent, r.Reason)
			}
			if r.Err == nil || !strings.Contains(r.Err.Error(), tc.want) {
				t.Fatalf("err %v, want it to mention %q", r.Err, tc.want)
			}
			assertRedacted(t, r)
		})
	}
	// The same key already in the field is sent unchanged.
	same := `{"idem":"` + key + `","amount":1}`
	if r := a.Dispatch(t.Context(), testMessage(same)); r.Outcome != dispatch.Success {
		t.Fatalf("payload already carrying the key: outcome %v, err %v", r.Outcome, r.Err)
	}
	reqs := p.seen()
	if len(reqs) != 1 || string(reqs[0].body) != same {
		t.Fatalf("requests %d, body %s", len(reqs), reqs[len(reqs)-1].body)
	}
}

func TestKeyPlacementValidate(t *testing.T) {
	base := Config{URL: "https://p.example/v1/{tool_name}?sig=x", Headers: map[string]string{"X-Tenant": "t"}}
	for _, tc := range []struct {
		name string
		p    KeyPlacement
		want string // "" = valid
	}{
		{"default", KeyPlacement{}, ""},
		{"header explicit default", KeyPlacement{Name: "Idempotency-Key", Location: LocationHeader}, ""},
		{"header no location", KeyPlacement{Name: "X-Key"}, ""},
		{"query", KeyPlacement{Name: "idem", Location: LocationQuery}, ""},
		{"body", KeyPlacement{Name: "idem", Location: LocationBody}, ""},
		{"bad header token", KeyPlacement{Name: "X Key", Location: LocationHeader}, "not a valid header name"},
		{"empty header", KeyPlacement{Location: LocationHeader}, "required field is missing"},
		{"reserved tuple header", KeyPlacement{Name: "x-agent-idempotency-tuple", Location: LocationHeader}, "set by drainer"},
		{"reserved content-type", KeyPlacement{Name: "Content-Type", Location: LocationHeader}, "set by drainer"},
		{"configured header", KeyPlacement{Name: "x-tenant", Location: LocationHeader}, "also configured"},
		{"empty query", KeyPlacement{Location: LocationQuery}, "required field is missing"},
		{"query already in url", KeyPlacement{Name: "sig", Location: LocationQuery}, "already in the adapter's url"},
		{"empty body", KeyPlacement{Location: LocationBody}, "required field is missing"},
		{"bad location", KeyPlacement{Name: "k", Location: "cookie"}, "header, query or body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range []Config{
				func() Config { c := base; c.KeyPlacement = tc.p; return c }(),
				func() Config { c := base; c.ToolKeyPlacement = map[string]KeyPlacement{"t": tc.p}; return c }(),
			} {
				err := c.WithDefaults().Validate()
				switch {
				case tc.want == "" && err != nil:
					t.Errorf("unexpected error: %v", err)
				case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
					t.Errorf("err %v, want %q", err, tc.want)
				case err != nil && !strings.Contains(err.Error(), "idempotency_key"):
					t.Errorf("err %v does not name idempotency_key", err)
				}
			}
		})
	}
}
