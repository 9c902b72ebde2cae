package webhook

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/dispatch"
)

// routeAdapter is an adapter whose base URL is srv/api?v=2 and whose tool
// charge_card has route r.
func routeAdapter(t *testing.T, p *provider, r Route, edit func(*Config)) *Adapter {
	t.Helper()
	return newTestAdapter(t, p.srv.URL, func(c *Config) {
		c.URL = p.srv.URL + "/api?v=2"
		c.Routes = map[string]Route{"charge_card": r}
		if edit != nil {
			edit(c)
		}
	})
}

func TestRouteMethodsOnTheWire(t *testing.T) {
	p := newProvider(t, func(*http.Request) answer { return answer{status: 200, body: `{}`} })
	payload := `{"order_id":"o-1","qty":2}`
	for _, tc := range []struct {
		method   string
		wantBody string
		wantCT   string
	}{
		{"", payload, "application/json"},
		{http.MethodPost, payload, "application/json"},
		{http.MethodPut, payload, "application/json"},
		{http.MethodPatch, payload, "application/json"},
		{http.MethodDelete, "", ""},
	} {
		t.Run(tc.method, func(t *testing.T) {
			before := len(p.seen())
			a := routeAdapter(t, p, Route{Method: tc.method, Path: "/v1/orders/{order_id}", Query: map[string]string{"expand": "items"}}, nil)
			m := testMessage(payload)
			m.Key += tc.method // a fresh key per method: no replay
			res := a.Dispatch(t.Context(), m)
			if res.Outcome != dispatch.Success {
				t.Fatalf("outcome %v: %v", res.Outcome, res.Err)
			}
			got := p.seen()[before]
			want := tc.method
			if want == "" {
				want = http.MethodPost
			}
			if got.method != want || got.uri != "/api/v1/orders/o-1?v=2&expand=items" {
				t.Errorf("sent %s %s, want %s /api/v1/orders/o-1?v=2&expand=items", got.method, got.uri, want)
			}
			if string(got.body) != tc.wantBody || got.header.Get("Content-Type") != tc.wantCT {
				t.Errorf("body %q content-type %q, want %q %q", got.body, got.header.Get("Content-Type"), tc.wantBody, tc.wantCT)
			}
			if got.header.Get("Idempotency-Key") != m.Key || got.header.Get("X-Agent-Idempotency-Tuple") != m.Tuple.Encoded() {
				t.Errorf("key headers %v", got.header)
			}
		})
	}
}

func TestRoutePathEscaping(t *testing.T) {
	p := newProvider(t, func(*http.Request) answer { return answer{status: 201, body: `{}`} })
	a := routeAdapter(t, p, Route{Method: http.MethodPut, Path: "/v1/{tool_name}/items/{id}/x"}, nil)
	for _, tc := range []struct{ value, want string }{
		{`"a/b c"`, "a%2Fb%20c"},
		{`"../etc"`, "..%2Fetc"},
		{`"q?x=1"`, "q%3Fx=1"},
		{`"h#frag"`, "h%23frag"},
		{`"100%"`, "100%25"},
		{`"%2e%2e"`, "%252e%252e"},
		{`"..."`, "..."},
		{`"é"`, "%C3%A9"},
		{`42`, "42"},
		{`-7`, "-7"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			before := len(p.seen())
			m := testMessage(`{"id":` + tc.value + `}`)
			m.Key += tc.value
			if res := a.Dispatch(t.Context(), m); res.Outcome != dispatch.Success {
				t.Fatalf("outcome %v: %v", res.Outcome, res.Err)
			}
			got := p.seen()[before]
			if want := "/api/v1/charge_card/items/" + tc.want + "/x?v=2"; got.uri != want {
				t.Errorf("uri %s, want %s", got.uri, want)
			}
		})
	}
}

func TestRoutePathRefusedValues(t *testing.T) {
	p := newProvider(t, func(*http.Request) answer { return answer{status: 200} })
	a := routeAdapter(t, p, Route{Method: http.MethodPatch, Path: "/v1/orders/{order_id}"}, nil)
	for name, tc := range map[string]struct{ payload, want string }{
		"missing":    {`{"id":"x"}`, "no such top-level field"},
		"object":     {`{"order_id":{"a":1}}`, "an object"},
		"array":      {`{"order_id":[1]}`, "an array"},
		"null":       {`{"order_id":null}`, "null"},
		"bool":       {`{"order_id":true}`, "a boolean"},
		"float":      {`{"order_id":1.5}`, "fraction or exponent"},
		"exponent":   {`{"order_id":1e3}`, "fraction or exponent"},
		"empty":      {`{"order_id":""}`, "empty"},
		"dot":        {`{"order_id":"."}`, "dot segment"},
		"dotdot":     {`{"order_id":".."}`, "dot segment"},
		"newline":    {`{"order_id":"a\nb"}`, "control character"},
		"nul":        {`{"order_id":"a\u0000b"}`, "control character"},
		"del":        {`{"order_id":"a\u007fb"}`, "control character"},
		"not object": {`[1,2]`, "not a JSON object"},
	} {
		t.Run(name, func(t *testing.T) {
			before := len(p.seen())
			res := a.Dispatch(t.Context(), testMessage(tc.payload))
			if res.Outcome != dispatch.Terminal || !res.NotSent || res.Reason != dispatch.ReasonUnsendable {
				t.Fatalf("result %+v, want terminal, not sent, %s", res, dispatch.ReasonUnsendable)
			}
			if msg := res.Err.Error(); !strings.Contains(msg, "{order_id}") || !strings.Contains(msg, tc.want) {
				t.Errorf("error %q does not name the field and %q", msg, tc.want)
			}
			if _, ok := errors.AsType[*FieldError](res.Err); !ok {
				t.Errorf("error is %T, want *FieldError", res.Err)
			}
			if len(p.seen()) != before {
				t.Error("a request was sent")
			}
		})
	}
}

func TestRouteKeyPlacementWithPath(t *testing.T) {
	p := newProvider(t, func(*http.Request) answer { return answer{status: 200} })
	a := routeAdapter(t, p, Route{Method: http.MethodDelete, Path: "/v1/orders/{order_id}"}, func(c *Config) {
		c.KeyPlacement = KeyPlacement{Name: "idem", Location: LocationQuery}
	})
	m := testMessage(`{"order_id":"o 9"}`)
	if res := a.Dispatch(t.Context(), m); res.Outcome != dispatch.Success {
		t.Fatalf("outcome %v: %v", res.Outcome, res.Err)
	}
	got := p.seen()[0]
	if want := "/api/v1/orders/o%209?v=2&idem=" + m.Key; got.uri != want || got.method != http.MethodDelete || len(got.body) != 0 {
		t.Errorf("sent %s %s body %q, want DELETE %s and no body", got.method, got.uri, got.body, want)
	}
}

func TestRouteValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		route Route
		place KeyPlacement
		want  string
	}{
		"method":        {Route{Method: "GET"}, KeyPlacement{}, `must be one of POST, PUT, PATCH, DELETE, got "GET"`},
		"lower method":  {Route{Method: "put"}, KeyPlacement{}, "must be one of"},
		"relative":      {Route{Path: "v1/x"}, KeyPlacement{}, `must begin with "/"`},
		"open brace":    {Route{Path: "/v1/{id"}, KeyPlacement{}, `unbalanced "{"`},
		"close brace":   {Route{Path: "/v1/id}"}, KeyPlacement{}, `unbalanced "}"`},
		"empty var":     {Route{Path: "/v1/{}"}, KeyPlacement{}, "empty variable"},
		"nested":        {Route{Path: "/v1/{{id}}"}, KeyPlacement{}, "nested braces"},
		"bad name":      {Route{Path: "/v1/{a..b}"}, KeyPlacement{}, "variable {a..b}"},
		"bad nested":    {Route{Path: "/v1/{a.9b}"}, KeyPlacement{}, "variable {a.9b}"},
		"query in path": {Route{Path: "/v1/x?a=1"}, KeyPlacement{}, "fixed query parameters go in query"},
		"space":         {Route{Path: "/v1/a b"}, KeyPlacement{}, "space"},
		"dotdot":        {Route{Path: "/v1/../admin"}, KeyPlacement{}, `segment ".."`},
		"query var":     {Route{Query: map[string]string{"q": "{id}"}}, KeyPlacement{}, "values are fixed"},
		"query key":     {Route{Query: map[string]string{"idem": "x"}}, KeyPlacement{Name: "idem", Location: LocationQuery}, "also carries the idempotency key"},
		"delete body":   {Route{Method: http.MethodDelete}, KeyPlacement{Name: "k", Location: LocationBody}, "DELETE sends no body"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := Config{URL: "https://api.example.com", Timeout: 1, KeyPlacement: tc.place, Routes: map[string]Route{"t": tc.route}}
			_, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `route of tool "t"`) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := New(Config{URL: "https://api.example.com/base/", Routes: map[string]Route{
		"t": {Method: http.MethodPatch, Path: "/v1/{tool_name}/{id}.json", Query: map[string]string{"a": "b c"}},
	}}); err != nil {
		t.Fatalf("valid route refused: %v", err)
	}
}

// FuzzPathExpand: whatever a payload holds, an expanded path has the
// template's segments exactly, never a dot segment, and unescapes to the
// value; a refused value is a *FieldError.
func FuzzPathExpand(f *testing.F) {
	for _, s := range []string{"a/b c", "..", ".", "", "%2e%2e", "?#", "\x00", "é/ü", "../../etc/passwd"} {
		f.Add(s)
	}
	tmpl, err := ParsePath("/v1/{tool_name}/items/{id}")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, v string) {
		payload, err := json.Marshal(map[string]string{"id": v})
		if err != nil {
			return
		}
		var back map[string]string // the value as JSON encoding wrote it
		if err := json.Unmarshal(payload, &back); err != nil {
			t.Fatal(err)
		}
		v = back["id"]
		p, err := tmpl.Expand("t/x", payload)
		if err != nil {
			if _, ok := errors.AsType[*FieldError](err); !ok {
				t.Fatalf("error %T %v", err, err)
			}
			return
		}
		segs := strings.Split(p, "/")
		if len(segs) != 5 || segs[4] == "." || segs[4] == ".." || segs[2] != "t%2Fx" {
			t.Fatalf("path %q from %q", p, v)
		}
		u, err := url.Parse("http://h" + p)
		if err != nil {
			t.Fatalf("path %q does not parse: %v", p, err)
		}
		if got, _ := url.PathUnescape(segs[4]); got != v || u.EscapedPath() != p {
			t.Fatalf("segment %q unescapes to %q, want %q; escaped path %q", segs[4], got, v, u.EscapedPath())
		}
	})
}

// TestRoutePathNestedFields: {a.b} reads field b of object field a (a
// compensation's {forward_response.id}), escaped as any segment; a step
// missing or not an object leaves the row unsent, naming the variable; and
// without_path_fields leaves the object in the body.
func TestRoutePathNestedFields(t *testing.T) {
	p := newProvider(t, func(*http.Request) answer { return answer{status: 200, body: `{}`} })
	a := routeAdapter(t, p, Route{Method: http.MethodPost, Path: "/v1/transfers/{forward_response.id}/reversal", Body: BodyWithoutPathFields}, nil)
	payload := `{"forward_key":"k","forward_response":{"id":"tr_1/x","amount":5}}`
	if res := a.Dispatch(t.Context(), testMessage(payload)); res.Outcome != dispatch.Success {
		t.Fatalf("outcome %v: %v", res.Outcome, res.Err)
	}
	got := p.seen()[0]
	if want := "/api/v1/transfers/tr_1%2Fx/reversal?v=2"; got.uri != want {
		t.Errorf("uri %s, want %s", got.uri, want)
	}
	if !strings.Contains(string(got.body), `"forward_response"`) || !strings.Contains(string(got.body), `"tr_1/x"`) {
		t.Errorf("body %s: the object a nested variable reads stays in it", got.body)
	}
	for name, tc := range map[string]struct{ payload, want string }{
		"missing step":  {`{"forward_key":"k"}`, "no such field"},
		"missing leaf":  {`{"forward_response":{"other":1}}`, "no such field"},
		"not an object": {`{"forward_response":"tr_1"}`, "no such field"},
		"leaf object":   {`{"forward_response":{"id":{"a":1}}}`, "an object"},
	} {
		t.Run(name, func(t *testing.T) {
			before := len(p.seen())
			res := a.Dispatch(t.Context(), testMessage(tc.payload))
			if res.Outcome != dispatch.Terminal || !res.NotSent || !strings.Contains(res.Err.Error(), "{forward_response.id}") || !strings.Contains(res.Err.Error(), tc.want) {
				t.Fatalf("result %+v (%v), want terminal, not sent, naming {forward_response.id} and %q", res, res.Err, tc.want)
			}
			if len(p.seen()) != before {
				t.Error("a request was sent")
			}
		})
	}
}
