package config

import (
	"testing"
)

// TestRouteRequestErrors checks method, path and query: every problem at
// once, each at its line.
func TestRouteRequestErrors(t *testing.T) {
	cfg, err := parse(t, `
adapters:
  api: {type: http, url: "https://api.example.com", idempotency_key: {name: idem, location: query}}
  body: {type: http, url: "https://b.example.com", idempotency_key: {name: request_id, location: body}}
  q: {type: nats, servers: ["nats://127.0.0.1:4222"], subject: "x.{tool_name}"}
routes:
  get: {adapter: api, method: GET}
  open: {adapter: api, path: "/v1/orders/{order_id"}
  close: {adapter: api, path: "/v1/orders/order_id}"}
  empty: {adapter: api, path: "/v1/orders/{}"}
  nested: {adapter: api, path: "/v1/orders/{{id}}"}
  relative: {adapter: api, path: "v1/orders"}
  inquery: {adapter: api, path: "/v1/orders?x=1"}
  templated: {adapter: api, path: "/v1/orders", query: {expand: "{items}", idem: x}}
  delete: {adapter: body, method: DELETE, path: "/v1/orders/{id}"}
  nats: {adapter: q, method: PUT, path: /x}
  ok: {adapter: api, method: PATCH, path: "/v1/{tool_name}/{id}", query: {expand: items}}
`, true)
	if err == nil {
		t.Fatalf("Parse succeeded (%s), want errors", cfg.Summary())
	}
	assertLines(t, errorLines(t, err), []string{
		`c.yaml:6:31: routes.get.method: must be one of POST, PUT, PATCH, DELETE, got "GET"`,
		`c.yaml:7:30: routes.open.path: unbalanced "{": a variable is written {name}`,
		`c.yaml:8:31: routes.close.path: unbalanced "}": a variable is written {name}`,
		`c.yaml:9:31: routes.empty.path: empty variable {}: name a top-level payload field`,
		`c.yaml:10:32: routes.nested.path: nested braces: a variable is written {name}, one level`,
		`c.yaml:11:34: routes.relative.path: must begin with "/" (it is appended to the adapter's url)`,
		`c.yaml:12:33: routes.inquery.path: "?" in the path: fixed query parameters go in query, a fragment is never sent`,
		`c.yaml:13:65: routes.templated.query.expand: query values are fixed in the config; a payload field cannot fill one (use a {field} in path, or leave it in the body)`,
		`c.yaml:13:76: routes.templated.query.idem: query parameter idem also carries the idempotency key`,
		`c.yaml:14:35: routes.delete.method: a DELETE sends no body, so its idempotency key cannot travel in the body; place it in a header or the query`,
		`c.yaml:15:22: routes.nats.method: method is valid only on routes whose adapter is http; adapter q is nats`,
		`c.yaml:15:35: routes.nats.path: path is valid only on routes whose adapter is http; adapter q is nats`,
	})
}

func TestRouteRequestValid(t *testing.T) {
	cfg := mustParse(t, `
adapters:
  orders_api: {type: http, url: "https://api.example.com"}
routes:
  update_order:
    adapter: orders_api
    method: PUT
    path: /v1/orders/{order_id}
    query: {expand: items}
  cancel_order: {adapter: orders_api, method: DELETE, path: "/v1/orders/{order_id}"}
`, true)
	r := cfg.Routes["update_order"]
	if r.Method != "PUT" || r.Path != "/v1/orders/{order_id}" || r.Query["expand"] != "items" {
		t.Errorf("route = %+v", r)
	}
}

// TestRouteRequestWarnsToolNameBase: a path appended to a url that still
// ends in {tool_name} is almost always a leftover; check says so.
func TestRouteRequestWarnsToolNameBase(t *testing.T) {
	cfg := mustParse(t, `
adapters:
  api: {type: http, url: "https://api.example.com/{tool_name}"}
routes:
  update_order: {adapter: api, method: PUT, path: "/v1/orders/{order_id}"}
`, true)
	want := "c.yaml:4:45: routes.update_order.path: the path is appended to adapters.api.url, which holds {tool_name}: requests go to .../{tool_name}/v1/orders/{order_id}; make that url the API's base"
	if len(cfg.Warnings) != 1 || cfg.Warnings[0] != want {
		t.Fatalf("warnings %q, want %q", cfg.Warnings, want)
	}
}

// TestRouteBody checks the body key of an http route: its two values are
// accepted (payload is the default), anything else is refused at its line
// with the allowed values, and so is the key on a route whose adapter is
// not http; `drainer check` and `drainer run` alike.
func TestRouteBody(t *testing.T) {
	for _, check := range []bool{true, false} {
		testRouteBody(t, check)
	}
}

func testRouteBody(t *testing.T, check bool) {
	cfg := mustParse(t, `
adapters:
  orders_api: {type: http, url: "https://api.example.com"}
routes:
  update_order: {adapter: orders_api, method: PUT, path: "/v1/orders/{order_id}", body: without_path_fields}
  create_order: {adapter: orders_api, path: /v1/orders, body: payload}
  cancel_order: {adapter: orders_api, method: DELETE, path: "/v1/orders/{order_id}", body: without_path_fields}
  notify: {adapter: orders_api}
`, check)
	for tool, want := range map[string]string{"update_order": "without_path_fields", "create_order": "payload", "cancel_order": "without_path_fields", "notify": ""} {
		if got := cfg.Routes[tool].Body; got != want {
			t.Errorf("routes.%s.body = %q, want %q", tool, got, want)
		}
	}
	cfg, err := parse(t, `
adapters:
  api: {type: http, url: "https://api.example.com", idempotency_key: {name: request_id, location: body}}
  q: {type: nats, servers: ["nats://127.0.0.1:4222"], subject: "x.{tool_name}"}
routes:
  typo: {adapter: api, method: PUT, path: "/v1/orders/{order_id}", body: without_path_field}
  empty: {adapter: api, body: ""}
  upper: {adapter: api, body: PAYLOAD}
  key: {adapter: api, path: "/v1/{request_id}", body: without_path_fields}
  nats: {adapter: q, body: payload}
`, check)
	if err == nil {
		t.Fatalf("Parse succeeded (%s), want errors", cfg.Summary())
	}
	assertLines(t, errorLines(t, err), []string{
		`c.yaml:5:74: routes.typo.body: must be one of payload, without_path_fields, got "without_path_field"`,
		`c.yaml:6:31: routes.empty.body: must be one of payload, without_path_fields, got ""`,
		`c.yaml:7:31: routes.upper.body: must be one of payload, without_path_fields, got "PAYLOAD"`,
		`c.yaml:8:55: routes.key.body: path field {request_id} also carries the idempotency key in the body; without_path_fields would send the key in its place`,
		`c.yaml:9:22: routes.nats.body: body is valid only on routes whose adapter is http; adapter q is nats`,
	})
}

// TestCompensationPathReadsCompensationFields: a route that undoes others
// gets a compensation's payload (forward_key, forward_payload,
// forward_response), so its path may read {forward_key}, {tool_name} and
// fields of the other two ({forward_response.id}); another field is
// refused at check, not found when a run is aborted and its saga halts on a
// compensation that can never be sent.
func TestCompensationPathReadsCompensationFields(t *testing.T) {
	_, err := parse(t, `
adapters:
  pay: {type: http, url: "https://pay.example.com"}
routes:
  send_transfer: {adapter: pay, class: non_idempotent, path: "/transfers/{account}", compensation: reverse_transfer}
  reverse_transfer: {adapter: pay, class: naturally_idempotent, path: "/transfers/{id}/reversal"}
`, true)
	if err == nil {
		t.Fatal("Parse succeeded, want the compensation's path refused")
	}
	assertLines(t, errorLines(t, err), []string{
		`c.yaml:5:71: routes.reverse_transfer.path: {id} cannot be filled: this route undoes send_transfer (their compensation), and a compensation's payload holds forward_key, forward_payload and forward_response, so a path reads {forward_key}, {tool_name} or a field of the other two ({forward_response.id}, {forward_payload.id}); every compensation would fail unsent`,
	})
	mustParse(t, `
adapters:
  pay: {type: http, url: "https://pay.example.com"}
routes:
  send_transfer: {adapter: pay, class: non_idempotent, path: "/transfers/{account}", compensation: reverse_transfer}
  reverse_transfer: {adapter: pay, class: naturally_idempotent, path: "/reversals/{forward_key}/{tool_name}"}
`, true)
	mustParse(t, `
adapters:
  pay: {type: http, url: "https://pay.example.com"}
routes:
  send_transfer: {adapter: pay, class: non_idempotent, path: "/transfers/{account}", compensation: reverse_transfer}
  reverse_transfer: {adapter: pay, class: naturally_idempotent, path: "/transfers/{forward_response.id}/reversal"}
`, true)
}
