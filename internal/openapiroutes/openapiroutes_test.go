package openapiroutes

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/config"
)

func importFile(t *testing.T, name string) (*Result, error) {
	t.Helper()
	return importFileOpts(t, name, Options{})
}

func importFileOpts(t *testing.T, name string, opts Options) (*Result, error) {
	t.Helper()
	path := filepath.Join("testdata", name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return Import(path, data, opts)
}

// checkSpliced puts the printed routes under a config with an http adapter
// named adapter and loads it as `drainer check` does.
func checkSpliced(t *testing.T, adapter string, res *Result) *config.Config {
	t.Helper()
	var out bytes.Buffer
	if err := WriteYAML(&out, "spec", adapter, res); err != nil {
		t.Fatal(err)
	}
	cfgText := "adapters:\n  " + adapter + ":\n    type: http\n    url: https://api.example.com\n" + out.String()
	cfg, err := config.Parse("spliced.yaml", []byte(cfgText), config.LoadOptions{Check: true})
	if err != nil {
		t.Fatalf("drainer check refuses the imported routes:\n%v\nconfig:\n%s", err, cfgText)
	}
	return cfg
}

func TestImportPayments30(t *testing.T) {
	res, err := importFile(t, "payments-3.0.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := checkSpliced(t, "payments", res)
	if len(cfg.Routes) != 5 {
		t.Fatalf("%d routes, want 5: %v", len(cfg.Routes), cfg.Summary())
	}
	want := map[string]struct {
		class string
		ttl   time.Duration
		key   *config.IdempotencyKey
		comp  string
		// window is the compensation_window (window_seconds); 0 when
		// the route has no compensation.
		window time.Duration
	}{
		"create_charge":    {"key_idempotent", 24 * time.Hour, &config.IdempotencyKey{Name: "Idempotency-Key", Location: "header"}, "", 0},
		"refund_charge":    {"key_idempotent", 7 * 24 * time.Hour, &config.IdempotencyKey{Name: "request_id", Location: "body"}, "", 0},
		"reverse_transfer": {"key_idempotent", 24 * time.Hour, &config.IdempotencyKey{Name: "idem", Location: "query"}, "", 0},
		"send_transfer":    {"non_idempotent", 0, nil, "reverse_transfer", time.Hour},
		"upsert_customer":  {"naturally_idempotent", 0, nil, "", 0},
	}
	for tool, w := range want {
		r := cfg.Routes[tool]
		if r == nil {
			t.Errorf("route %s missing", tool)
			continue
		}
		if r.Adapter != "payments" || r.Class != w.class || r.KeyTTL != w.ttl || r.Compensation != w.comp || r.CompensationWindow != w.window ||
			(w.key == nil) != (r.IdempotencyKey == nil) || (w.key != nil && *w.key != *r.IdempotencyKey) {
			t.Errorf("route %s = %+v, key %+v; want %+v", tool, r, r.IdempotencyKey, w)
		}
	}
	if cfg.Routes["list_charges"] != nil || cfg.Routes["health"] != nil {
		t.Error("read_only or unannotated operation routed")
	}
	var out bytes.Buffer
	WriteYAML(&out, "spec", "payments", res)
	if !strings.Contains(out.String(), "# read_only operations are not routed: list_charges") {
		t.Errorf("no comment naming the read_only operations:\n%s", out.String())
	}
}

func TestImportOrders31(t *testing.T) {
	if _, err := importFile(t, "orders-3.1.json"); err == nil ||
		!strings.Contains(err.Error(), "#/paths/~1v1~1sms/post: x-agent-idempotency.agent_safe: false: the document marks this operation unsafe for agents; refused (pass --allow-unsafe") {
		t.Fatalf("agent_safe: false routed without --allow-unsafe: %v", err)
	}
	res, err := importFileOpts(t, "orders-3.1.json", Options{AllowUnsafe: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := checkSpliced(t, "orders", res)
	if len(cfg.Routes) != 4 || cfg.Routes["sendReceipt"].Compensation != "cancelOrder" ||
		cfg.Routes["createOrder"].KeyTTL != 24*time.Hour || cfg.Routes["sendSms"].Class != "non_idempotent" {
		t.Fatalf("routes: %s", cfg.Summary())
	}
	// cancelOrder undoes sendReceipt: its {id} is read from the forward
	// call's answer.
	if r := cfg.Routes["cancelOrder"]; r.Method != "POST" || r.Path != "/v1/orders/{forward_response.id}/cancel" {
		t.Errorf("cancelOrder: %s %s", r.Method, r.Path)
	}
	var out bytes.Buffer
	if err := WriteYAML(&out, "spec", "orders", res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"  \"sendSms\":  # #/paths/~1v1~1sms/post\n    # agent_safe: false in the document: routed because --allow-unsafe was given\n",
		`    # detection "webhook email.delivered" has no detect probe: not a GET request of a path;`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestImportBroken(t *testing.T) {
	_, err := importFile(t, "broken.yaml")
	if err == nil {
		t.Fatal("broken manifest accepted")
	}
	msg := err.Error()
	p := "testdata/broken.yaml: "
	for _, want := range []string{
		p + "#/paths/~1charges/post: x-agent-idempotency.ttl_seconds: missing",
		p + "#/paths/~1charges/post: x-agent-idempotency.scope: missing",
		p + "#/paths/~1charges/post: x-agent-idempotency.replay_header: missing",
		p + "#/paths/~1charges/post: x-agent-idempotency.conflict_status: missing",
		p + "#/paths/~1transfers/post: x-agent-idempotency.compensation: missing",
		p + "#/paths/~1payouts/post: x-agent-idempotency.compensation.detection: missing",
		p + `#/paths/~1payouts/post: x-agent-idempotency.compensation.operation: "cancel_payout" is not an operation`,
		p + "#/paths/~1refunds/post: operationId: missing",
		p + `#/paths/~1refunds~1{id}/put: operationId "create_charge" is also used by #/paths/~1charges/post`,
		p + `#/paths/~1notes/post: x-agent-idempotency.class: unknown class "mostly_idempotent"; valid: read_only, naturally_idempotent, key_idempotent, non_idempotent`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing problem %q in:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "key_field: missing") {
		t.Errorf("key_field was given:\n%s", msg)
	}
}

func TestImportNotOpenAPI(t *testing.T) {
	for name, doc := range map[string]string{
		"config":    "adapters: {}\n",
		"swagger 2": "swagger: \"2.0\"\ninfo: {title: x, version: \"1\"}\npaths: {}\n",
		"garbage":   "\x00\xff{[",
		"empty":     "",
		"no paths":  "openapi: 3.0.3\ninfo: {title: x, version: \"1\"}\npaths: {}\n",
		"bad paths": "openapi: 3.0.3\ninfo: {title: x, version: \"1\"}\npaths: 7\n",
		"ext not object": "openapi: 3.0.3\ninfo: {title: x, version: \"1\"}\npaths:\n  /a:\n    post:\n      operationId: a\n" +
			"      x-agent-idempotency: [1]\n      responses: {\"200\": {description: ok}}\n",
		"ext wrong types": "openapi: 3.0.3\ninfo: {title: x, version: \"1\"}\npaths:\n  /a:\n    post:\n      operationId: a\n" +
			"      x-agent-idempotency: {class: key_idempotent, ttl_seconds: soon}\n      responses: {\"200\": {description: ok}}\n",
	} {
		t.Run(name, func(t *testing.T) {
			if res, err := Import("f.yaml", []byte(doc), Options{}); err == nil {
				t.Fatalf("accepted: %+v", res)
			} else if !strings.HasPrefix(err.Error(), "f.yaml:") {
				t.Fatalf("error does not name the file: %v", err)
			}
		})
	}
}

func FuzzImport(f *testing.F) {
	for _, name := range []string{"payments-3.0.yaml", "orders-3.1.json", "broken.yaml", "refusals.yaml", "petstore-expanded-3.0.yaml", "box-comments-tasks-3.0.json", "shop-rest-3.0.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := Import("f", data, Options{})
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := WriteYAML(&out, "f", "a", res); err != nil {
			t.Fatal(err)
		}
	})
}

// TestImportEveryRefusalAtOnce: no problem hides another, within an
// operation or across operations.
func TestImportEveryRefusalAtOnce(t *testing.T) {
	_, err := importFile(t, "refusals.yaml")
	if err == nil {
		t.Fatal("accepted")
	}
	p := "testdata/refusals.yaml: "
	got := strings.Split(err.Error(), "\n")
	want := []string{
		p + "#/paths/~1charges/post: x-agent-idempotency.ttl_seconds: must be a number",
		p + "#/paths/~1charges/post: x-agent-idempotency.replay_header: missing (required for key_idempotent: how a replay is marked (replay_header, or replay_status))",
		p + `#/paths/~1charges~1{id}/put: operationId "create_charge" is also used by #/paths/~1charges/post`,
		p + `#/paths/~1charges~1{id}/put: x-agent-idempotency.class: unknown class "mostly_idempotent"; valid: read_only, naturally_idempotent, key_idempotent, non_idempotent`,
		p + `#/paths/~1notes/post: x-agent-idempotency.clas: unknown field; did you mean "class"?`,
		p + "#/paths/~1notes/post: x-agent-idempotency.class: missing (one of read_only, naturally_idempotent, key_idempotent, non_idempotent)",
		p + `#/paths/~1payouts/post: x-agent-idempotency.compensation.windw_seconds: unknown field; did you mean "window_seconds"?`,
		p + "#/paths/~1payouts/post: x-agent-idempotency.compensation.window_seconds: missing (the maximum reversal window)",
		p + "#/paths/~1carts~1{cart_id}~1lines~1{line_id}/put: path parameter {cart_id}: missing from the request body schema's properties, which declare {line_id} and allow no other: neither the payload nor the payload without the path fields is a valid body",
		p + "#/paths/~1flags~1{enabled}/put: path parameter {enabled}: of type boolean; a path variable is filled from a string or an integer field",
		p + "#/paths/~1orders~1{order_id}/patch: path parameter {order_id}: not in the request body schema's required list (a row without it would fail unsent)",
		p + "#/paths/~1orders~1{order_id}/get: method GET cannot be routed: an http route sends POST, PUT, PATCH, DELETE",
		p + "#/paths/~1items~1{item.id}/delete: path /items/{item.id}: parameter {item.id}: a drainer path reads {a.b} as field b of object field a, so a parameter named with a dot cannot be filled; rename it",
		p + "#/paths/~1sms/post: x-agent-idempotency.agent_safe: false: the document marks this operation unsafe for agents; refused (pass --allow-unsafe to route it anyway)",
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("missing problem\n  %s\nin:\n%s", w, err)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(got), len(want), err)
	}
}

func TestImportSyntaxErrorHasLine(t *testing.T) {
	for name, tc := range map[string]struct{ doc, want string }{
		"yaml": {"openapi: 3.0.3\ninfo: {title: x, version: \"1\"}\npaths:\n  /a:\n    post: [\n", "f:5:"},
		"json": {"{\n  \"openapi\": \"3.1.0\",\n  \"paths\": {\n    \"/a\": {\"post\": {}}\n    \"/b\": {}\n  }\n}\n", "f:5:"},
		"tab":  {"openapi: 3.0.3\npaths:\n\t/a: {}\n", "f:3:"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Import("f", []byte(tc.doc), Options{})
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || !strings.Contains(err.Error(), "invalid YAML or JSON") {
				t.Fatalf("error %v, want prefix %q", err, tc.want)
			}
		})
	}
}

// TestImportRealWorldSpecs imports trimmed public documents of real APIs
// (testdata/README.md): `check` accepts the output, and each route carries
// its operation's method and path.
func TestImportRealWorldSpecs(t *testing.T) {
	for _, tc := range []struct {
		file, adapter, server string
		want                  map[string][2]string // tool → method, path
		readOnly              []string
	}{
		{"openai-vector-stores-3.1.yaml", "openai", "https://api.openai.com/v1", map[string][2]string{
			"createVectorStore": {"POST", "/vector_stores"},
			"modifyVectorStore": {"POST", "/vector_stores/{vector_store_id}"},
			"deleteVectorStore": {"DELETE", "/vector_stores/{vector_store_id}"},
			"deleteFile":        {"DELETE", "/files/{file_id}"},
		}, []string{"getVectorStore"}},
		{"box-comments-tasks-3.0.json", "box", "https://api.box.com/2.0", map[string][2]string{
			"post_comments": {"POST", "/comments"},
			// it undoes post_comments, which answers {id, …}
			"delete_comments_id": {"DELETE", "/comments/{forward_response.id}"},
			"post_tasks":         {"POST", "/tasks"},
			"delete_tasks_id":    {"DELETE", "/tasks/{task_id}"},
		}, []string{"get_comments_id"}},
		{"petstore-expanded-3.0.yaml", "petstore", "https://petstore.swagger.io/v2", map[string][2]string{
			"addPet":    {"POST", "/pets"},
			"deletePet": {"DELETE", "/pets/{id}"},
		}, []string{"findPets"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			res, err := importFile(t, tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if res.Server != tc.server || !slices.Equal(res.ReadOnly, tc.readOnly) {
				t.Errorf("server %q read_only %v", res.Server, res.ReadOnly)
			}
			cfg := checkSpliced(t, tc.adapter, res)
			if len(cfg.Routes) != len(tc.want) {
				t.Fatalf("%d routes, want %d: %s", len(cfg.Routes), len(tc.want), cfg.Summary())
			}
			for tool, mp := range tc.want {
				if r := cfg.Routes[tool]; r == nil || r.Method != mp[0] || r.Path != mp[1] {
					t.Errorf("route %s = %+v, want %s %s", tool, r, mp[0], mp[1])
				}
			}
			if r := cfg.Routes["post_comments"]; r != nil && r.Detect.URL != "https://api.box.com/2.0/comments/{key}" {
				t.Errorf("post_comments detect = %+v, want the detection as a probe", r.Detect)
			}
		})
	}
}

// TestImportRealWorldPathParamNotInBody: the OpenAI document as published
// does not list an operation's path parameter in its request body; once
// annotated, the operation is routed with body: without_path_fields, and
// `check` accepts it.
func TestImportRealWorldPathParamNotInBody(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "openai-vector-stores-3.1.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const at = "      operationId: modifyAssistant\n"
	if !bytes.Contains(data, []byte(at)) {
		t.Fatal("fixture changed: no modifyAssistant operation")
	}
	data = bytes.Replace(data, []byte(at), []byte(at+"      x-agent-idempotency: {class: naturally_idempotent}\n"), 1)
	res, err := Import("openai.yaml", data, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := checkSpliced(t, "openai", res)
	if r := cfg.Routes["modifyAssistant"]; r == nil || r.Method != "POST" || r.Path != "/assistants/{assistant_id}" || r.Body != "without_path_fields" {
		t.Fatalf("modifyAssistant = %+v, want POST /assistants/{assistant_id} with body: without_path_fields", r)
	}
	// modifyVectorStore's schema declares its path parameter (the fixture
	// adds it): the payload stays the body.
	if r := cfg.Routes["modifyVectorStore"]; r == nil || r.Body != "" {
		t.Errorf("modifyVectorStore = %+v, want the default body", r)
	}
}

// TestImportTypicalREST: a REST API whose bodies do not repeat the path's
// parameters imports; each route's body key follows its body schema.
func TestImportTypicalREST(t *testing.T) {
	res, err := importFile(t, "shop-rest-3.0.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := checkSpliced(t, "shop", res)
	want := map[string][3]string{ // tool → method, path, body
		"createOrder":       {"POST", "/v1/orders", ""},
		"updateOrderStatus": {"PUT", "/v1/orders/{order_id}", "without_path_fields"},
		"deleteOrder":       {"DELETE", "/v1/orders/{order_id}", ""},
		"refundOrder":       {"POST", "/v1/orders/{order_id}/refunds", "without_path_fields"},
		// The schema declares {address_id} but not {customer_id}: the
		// payload stays the body, every declared field in it.
		"putAddress": {"PUT", "/v1/customers/{customer_id}/addresses/{address_id}", ""},
	}
	if len(cfg.Routes) != len(want) || !slices.Equal(res.ReadOnly, []string{"getOrder"}) {
		t.Fatalf("routes %s, read_only %v", cfg.Summary(), res.ReadOnly)
	}
	for tool, w := range want {
		if r := cfg.Routes[tool]; r == nil || r.Method != w[0] || r.Path != w[1] || r.Body != w[2] {
			t.Errorf("route %s = %+v, want %s %s body %q", tool, r, w[0], w[1], w[2])
		}
	}
	var out bytes.Buffer
	if err := WriteYAML(&out, "spec", "shop", res); err != nil {
		t.Fatal(err)
	}
	if want := "    path: \"/v1/orders/{order_id}\"\n    body: without_path_fields  # the request body schema does not declare the path's parameters\n"; !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}
	if n := strings.Count(out.String(), "body: "); n != 2 {
		t.Errorf("%d body keys, want 2:\n%s", n, out.String())
	}
}

// TestImportCompensationWindow: a compensation's window_seconds becomes the
// route's compensation_window, written in the shortest form a config
// reads, and `check` loads it as that window (not the 7-day default); a
// window that is not a whole, positive number of seconds is refused.
func TestImportCompensationWindow(t *testing.T) {
	// The example of docs/openapi-import.md, with the window as given.
	doc := func(window string) []byte {
		return []byte(`openapi: 3.0.3
info: {title: payments, version: "1"}
paths:
  /transfers:
    post:
      operationId: send_transfer
      x-agent-idempotency:
        class: non_idempotent
        compensation: {operation: reverse_transfer, detection: "GET /transfers/{id}", window_seconds: ` + window + `}
      responses: {"201": {description: ok}}
  /transfers/{id}/reversal:
    post:
      operationId: reverse_transfer
      parameters: [{in: path, name: id, required: true, schema: {type: string}}]
      x-agent-idempotency: {class: naturally_idempotent}
      responses: {"200": {description: ok}}
`)
	}
	for _, tc := range []struct {
		window string
		line   string        // the line written
		want   time.Duration // the window `check` loads
	}{
		{"3600", "    compensation_window: 1h\n", time.Hour},
		{"90", "    compensation_window: 1m30s\n", 90 * time.Second},
		{"1", "    compensation_window: 1s\n", time.Second},
		{"604800", "    compensation_window: 168h\n", 7 * 24 * time.Hour},
		{"93784", "    compensation_window: 26h3m4s\n", 26*time.Hour + 3*time.Minute + 4*time.Second},
	} {
		t.Run(tc.window, func(t *testing.T) {
			res, err := Import("payments.yaml", doc(tc.window), Options{})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := WriteYAML(&out, "payments.yaml", "payments", res); err != nil {
				t.Fatal(err)
			}
			if want := "    compensation: \"reverse_transfer\"\n" + tc.line; !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, out.String())
			}
			if n := strings.Count(out.String(), "compensation_window:"); n != 1 {
				t.Errorf("%d compensation_window keys, want 1 (send_transfer's):\n%s", n, out.String())
			}
			cfg := checkSpliced(t, "payments", res)
			if r := cfg.Routes["send_transfer"]; r == nil || r.CompensationWindow != tc.want {
				t.Errorf("send_transfer = %+v, want compensation_window %s", r, tc.want)
			}
		})
	}
	for _, window := range []string{"0", "-60", "1.5", "315360001"} {
		t.Run("refused "+window, func(t *testing.T) {
			_, err := Import("payments.yaml", doc(window), Options{})
			want := "payments.yaml: #/paths/~1transfers/post: x-agent-idempotency.compensation.window_seconds: must be a whole number of seconds from 1 to 315360000 (10 years), got " + window
			if err == nil || err.Error() != want {
				t.Errorf("error:\n%v\nwant:\n%s", err, want)
			}
		})
	}
}

// TestImportRefusesWhatCheckRefuses: a route the import would print that
// `drainer check` refuses (a DELETE carrying its key in the body) is a
// refusal of the import, at its operation, not a config found broken once
// pasted.
func TestImportRefusesWhatCheckRefuses(t *testing.T) {
	doc := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /f/{n}:
    delete:
      operationId: del_f
      parameters: [{in: path, name: n, required: true, schema: {type: integer}}]
      x-agent-idempotency: {class: key_idempotent, key_field: Idempotency-Key, key_location: body, ttl_seconds: 3600,
                            scope: x, replay_status: 200, conflict_status: 409}
`
	_, err := Import("api.yaml", []byte(doc), Options{})
	want := "api.yaml: #/paths/~1f~1{n}/delete: the route it becomes: routes.del_f.method: a DELETE sends no body, so its idempotency key cannot travel in the body; place it in a header or the query"
	if err == nil || err.Error() != want {
		t.Fatalf("import: %v\nwant: %s", err, want)
	}
}
