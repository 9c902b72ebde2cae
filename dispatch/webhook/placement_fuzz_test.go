package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/drainer-io/drainer/idemkey"
)

// isJSONObject reports whether payload is one JSON value (RFC 8259: only
// space, tab, CR and LF around it) and that value is an object.
func isJSONObject(payload []byte) bool {
	trimmed := bytes.TrimLeft(payload, " \t\r\n")
	return json.Valid(payload) && len(trimmed) > 0 && trimmed[0] == '{'
}

// FuzzWithKeyField checks key placement `location: body` (docs/reference.md §5) on
// any payload: a payload that is not a JSON object is refused with
// errPayloadNotObject; an object gets the key as top-level field name and
// keeps every other member byte for byte (whitespace aside); an object
// that already has the field keeps it when it holds the key and is refused
// otherwise; no error quotes the payload.
func FuzzWithKeyField(f *testing.F) {
	for _, seed := range []struct{ payload, name string }{
		{`{"amount":500,"currency":"eur"}`, "idempotency_key"},
		{` {"nested":{"idempotency_key":"x"},"list":[1,2,{"a":null}]} `, "idempotency_key"},
		{`{"html":"<a href=\"x\">&amp;</a>","sep":"\u2028\u2029","esc":"\u00e9\n\t\\\"\/"}`, "request_id"},
		{`{"big":12345678901234567890123,"exp":1e999,"neg":-0.0,"small":1E-400}`, "k"},
		{`{"raw":"é€😀","ctl":"\u0001\u001f","nul":"\u0000","lone":"\ud800"}`, "idem"},
		{`{"idem":"idem_v1_0123456789abcdef0123456789abcdef"}`, "idem"},
		{`{"idem":"idem\u005fv1_0123456789abcdef0123456789abcdef"}`, "idem"},
		{`{"idem":"other"}`, "idem"},
		{`{"idem":null}`, "idem"},
		{`{"a":1,"a":2}`, "b"},
		{`{"":1}`, "Ünïcødé ✓"},
		{`{}`, "id"},
		{`[]`, "id"},
		{`"string"`, "id"},
		{`null`, "id"},
		{``, "id"},
		{`{"a":1} {"b":2}`, "id"},
		{`{"a":1`, "id"},
		{"\v{\"a\":1}", "id"},
		{"\u00a0{\"a\":1}", "id"},
		{"{\"a\":\"\xff\"}", "id"},
	} {
		f.Add([]byte(seed.payload), seed.name)
	}
	key := idemkey.Tuple{AgentRunID: "run-1", StepID: "charge", ToolName: "charge_card"}.Key()

	f.Fuzz(func(t *testing.T, payload []byte, name string) {
		if name == "" || !utf8.ValidString(name) {
			return // config refuses an empty name; YAML gives valid UTF-8 only
		}
		out, err := withKeyField(payload, name, key)

		if !isJSONObject(payload) {
			if err == nil || !errors.Is(err, errPayloadNotObject) {
				t.Fatalf("payload %q is not a JSON object: got %q, %v; want errPayloadNotObject", payload, out, err)
			}
			return
		}
		var before map[string]json.RawMessage
		if err := json.Unmarshal(payload, &before); err != nil {
			t.Fatalf("test oracle: %v", err)
		}
		if old, ok := before[name]; ok {
			var s string
			if json.Unmarshal(old, &s) == nil && s == key {
				if err != nil || !bytes.Equal(out, payload) {
					t.Fatalf("payload already holding the key: got %q, %v; want it unchanged", out, err)
				}
				return
			}
			if err == nil || errors.Is(err, errPayloadNotObject) {
				t.Fatalf("field %q holds %s, not the key: got %q, %v; want a refusal naming the field", name, old, out, err)
			}
			if !strings.Contains(err.Error(), name) {
				t.Fatalf("refusal %q does not name the field %q", err, name)
			}
			if !strings.Contains(name, "{") && strings.Contains(err.Error(), "{") {
				t.Fatalf("refusal quotes the payload: %q", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("object payload %q refused: %v", payload, err)
		}
		if !json.Valid(out) {
			t.Fatalf("output is not JSON: %q", out)
		}
		var after map[string]json.RawMessage
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("output is not an object: %q: %v", out, err)
		}
		var got string
		if err := json.Unmarshal(after[name], &got); err != nil || got != key {
			t.Fatalf("field %q = %s, want the key %q", name, after[name], key)
		}
		if len(after) != len(before)+1 {
			t.Fatalf("%d members after, %d before: %q -> %q", len(after), len(before), payload, out)
		}
		for k, v := range before {
			if !bytes.Equal(compact(t, v), compact(t, after[k])) {
				t.Fatalf("member %q changed: %s -> %s", k, v, after[k])
			}
		}
	})
}

func compact(t *testing.T, raw json.RawMessage) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("compact %q: %v", raw, err)
	}
	return b.Bytes()
}
