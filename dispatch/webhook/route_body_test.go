package webhook

import (
	"net/http"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/dispatch"
)

// TestRouteBodyWithoutPathFields: with body: without_path_fields, POST,
// PUT and PATCH send the payload object without the top-level fields the
// path read ({tool_name} is not a payload field, and a nested field of the
// same name stays); DELETE still sends no body; the path is the same as
// with the payload as the body.
func TestRouteBodyWithoutPathFields(t *testing.T) {
	p := newProvider(t, func(*http.Request) answer { return answer{status: 200, body: `{}`} })
	payload := `{"order_id":"o/1","line":7,"tool_name":"kept","status":"paid","meta":{"order_id":"nested <&>"}}`
	want := `{"meta":{"order_id":"nested <&>"},"status":"paid","tool_name":"kept"}`
	for _, tc := range []struct {
		method   string
		wantBody string
		wantCT   string
	}{
		{"", want, "application/json"},
		{http.MethodPost, want, "application/json"},
		{http.MethodPut, want, "application/json"},
		{http.MethodPatch, want, "application/json"},
		{http.MethodDelete, "", ""},
	} {
		t.Run(tc.method, func(t *testing.T) {
			before := len(p.seen())
			a := routeAdapter(t, p, Route{Method: tc.method, Path: "/v1/{tool_name}/orders/{order_id}/lines/{line}", Body: BodyWithoutPathFields}, nil)
			m := testMessage(payload)
			m.Key += tc.method
			if res := a.Dispatch(t.Context(), m); res.Outcome != dispatch.Success {
				t.Fatalf("outcome %v: %v", res.Outcome, res.Err)
			}
			got := p.seen()[before]
			if wantURI := "/api/v1/charge_card/orders/o%2F1/lines/7?v=2"; got.uri != wantURI {
				t.Errorf("uri %s, want %s", got.uri, wantURI)
			}
			if string(got.body) != tc.wantBody || got.header.Get("Content-Type") != tc.wantCT {
				t.Errorf("body %q content-type %q, want %q %q", got.body, got.header.Get("Content-Type"), tc.wantBody, tc.wantCT)
			}
		})
	}
}

// TestRouteBodyModesUnchanged: body: payload, and without_path_fields on a
// route whose path reads no field, send the payload byte for byte.
func TestRouteBodyModesUnchanged(t *testing.T) {
	p := newProvider(t, func(*http.Request) answer { return answer{status: 200, body: `{}`} })
	payload := `{ "order_id": "o-1", "status": "paid" }`
	for name, r := range map[string]Route{
		"payload":             {Method: http.MethodPut, Path: "/v1/orders/{order_id}", Body: BodyPayload},
		"no path field":       {Method: http.MethodPut, Path: "/v1/{tool_name}", Body: BodyWithoutPathFields},
		"no path":             {Body: BodyWithoutPathFields},
		"not an object, none": {Body: BodyWithoutPathFields},
	} {
		t.Run(name, func(t *testing.T) {
			before := len(p.seen())
			body := payload
			if name == "not an object, none" {
				body = `[1,2]`
			}
			m := testMessage(body)
			m.Key += name
			if res := routeAdapter(t, p, r, nil).Dispatch(t.Context(), m); res.Outcome != dispatch.Success {
				t.Fatalf("outcome %v: %v", res.Outcome, res.Err)
			}
			if got := p.seen()[before]; string(got.body) != body {
				t.Errorf("body %q, want the payload %q", got.body, body)
			}
		})
	}
}

// TestRouteBodyWithoutPathFieldsAndBodyKey: a key placed in the body is
// added to the body left once the path fields are out; a payload that cannot
// fill the path still fails unsent, naming the field.
func TestRouteBodyWithoutPathFieldsAndBodyKey(t *testing.T) {
	p := newProvider(t, func(*http.Request) answer { return answer{status: 200} })
	a := routeAdapter(t, p, Route{Method: http.MethodPost, Path: "/v1/orders/{order_id}/refunds", Body: BodyWithoutPathFields}, func(c *Config) {
		c.KeyPlacement = KeyPlacement{Name: "request_id", Location: LocationBody}
	})
	m := testMessage(`{"order_id":"o-9","amount":120}`)
	if res := a.Dispatch(t.Context(), m); res.Outcome != dispatch.Success {
		t.Fatalf("outcome %v: %v", res.Outcome, res.Err)
	}
	got := p.seen()[0]
	if want := `{"amount":120,"request_id":"` + m.Key + `"}`; string(got.body) != want || got.uri != "/api/v1/orders/o-9/refunds?v=2" {
		t.Errorf("sent %s body %s, want /api/v1/orders/o-9/refunds?v=2 body %s", got.uri, got.body, want)
	}
	for _, payload := range []string{`{"amount":120}`, `[1]`, `"o-9"`} {
		res := a.Dispatch(t.Context(), testMessage(payload))
		if res.Outcome != dispatch.Terminal || !res.NotSent || res.Reason != dispatch.ReasonUnsendable || !strings.Contains(res.Err.Error(), "{order_id}") {
			t.Errorf("payload %s: result %+v, want terminal, not sent, naming {order_id}", payload, res)
		}
	}
	if len(p.seen()) != 1 {
		t.Errorf("%d requests, want 1", len(p.seen()))
	}
}

func TestRouteBodyValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		route Route
		place KeyPlacement
		want  string
	}{
		"unknown": {Route{Body: "json"}, KeyPlacement{}, `body: must be one of payload, without_path_fields, got "json"`},
		"case":    {Route{Body: "Payload"}, KeyPlacement{}, "must be one of payload, without_path_fields"},
		"key is a path field": {Route{Path: "/v1/{request_id}", Body: BodyWithoutPathFields}, KeyPlacement{Name: "request_id", Location: LocationBody},
			"path field {request_id} also carries the idempotency key in the body"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(Config{URL: "https://api.example.com", KeyPlacement: tc.place, Routes: map[string]Route{"t": tc.route}})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `route of tool "t"`) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	for _, r := range []Route{
		{Method: http.MethodPut, Path: "/v1/{id}", Body: BodyWithoutPathFields},
		{Method: http.MethodDelete, Path: "/v1/{id}", Body: BodyWithoutPathFields},
		{Body: BodyPayload},
	} {
		if _, err := New(Config{URL: "https://api.example.com", Routes: map[string]Route{"t": r}}); err != nil {
			t.Errorf("route %+v refused: %v", r, err)
		}
	}
}
