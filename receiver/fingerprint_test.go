package receiver_test

import (
	"encoding/hex"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/drainer-io/drainer/receiver"
)

var update = flag.Bool("update", false, "rewrite testdata/fingerprint-vectors.json from the Go implementation")

// fingerprintVector is one case of testdata/fingerprint-vectors.json, which
// the Python and TypeScript receivers check too, so all three fingerprint
// a request alike.
type fingerprintVector struct {
	Name        string `json:"name"`
	Method      string `json:"method"`
	Path        string `json:"path"`
	ContentType string `json:"content_type"`
	Body        string `json:"body"`
	Canonical   string `json:"canonical"`
	Fingerprint string `json:"fingerprint"`
}

var vectorInputs = []fingerprintVector{
	{Name: "object key order and whitespace", Method: "POST", Path: "/v1/orders", ContentType: "application/json", Body: " {\"b\": [1, 2], \"a\": {\"z\": null, \"y\": true}} "},
	{Name: "numbers", Method: "post", Path: "/v1/n", ContentType: "application/json", Body: `[1.0, -0, 1e21, 1e20, 1e-7, 0.000001, 100000000000000000000000, 0.1, 5e-324, 1.7976931348623157e308, 9007199254740992, -1.5E+3]`},
	{Name: "string escapes", Method: "POST", Path: "/v1/s", ContentType: "application/json; charset=utf-8", Body: `{"s":"\u00e9\u2028\/\"\\\b\f\n\r\t\u0001\u001f\u007f","emoji":"\ud83d\ude00"}`},
	{Name: "keys sorted by UTF-16 code units", Method: "POST", Path: "/v1/k", ContentType: "application/json", Body: `{"\ud83d\ude00":1,"\uffff":2,"a":3,"A":4,"":5,"é":6}`},
	{Name: "nested", Method: "PUT", Path: "/v1/orders/42", ContentType: "application/vnd.api+json", Body: `{"data":[{"id":"1","attrs":{"b":false,"a":[[],{}]}}]}`},
	{Name: "top-level scalar", Method: "PATCH", Path: "/x", ContentType: "application/json", Body: ` "text" `},
	{Name: "not JSON content type", Method: "POST", Path: "/v1/raw", ContentType: "text/plain", Body: `{"b":1, "a":2}`},
	{Name: "no content type", Method: "POST", Path: "/v1/raw", ContentType: "", Body: `{"b":1, "a":2}`},
	{Name: "invalid JSON", Method: "POST", Path: "/v1/bad", ContentType: "application/json", Body: `{"a":1,`},
	{Name: "duplicate key", Method: "POST", Path: "/v1/dup", ContentType: "application/json", Body: `{"a":1,"a":2}`},
	{Name: "lone surrogate", Method: "POST", Path: "/v1/sur", ContentType: "application/json", Body: `["\ud800"]`},
	{Name: "number out of range", Method: "POST", Path: "/v1/big", ContentType: "application/json", Body: `[1e400]`},
	{Name: "NaN literal", Method: "POST", Path: "/v1/nan", ContentType: "application/json", Body: `[NaN]`},
	{Name: "trailing data", Method: "POST", Path: "/v1/t", ContentType: "application/json", Body: `{"a":1} {}`},
	{Name: "empty body", Method: "DELETE", Path: "/v1/orders/42", ContentType: "", Body: ``},
	{Name: "empty JSON body", Method: "DELETE", Path: "/v1/orders/42", ContentType: "application/json", Body: ``},
	{Name: "escaped path", Method: "POST", Path: "/v1/a%20b/%C3%A9", ContentType: "application/json", Body: `{}`},
	{Name: "problem+json", Method: "POST", Path: "/p", ContentType: "application/problem+json", Body: `{"type":"x","status":400}`},
	{Name: "json-ish type that is not JSON", Method: "POST", Path: "/p", ContentType: "text/json-not", Body: `{"b":1,"a":2}`},
	// A number whose value is not the value of the text JCS writes for
	// its double: the body has no canonical form (docs/receiver.md).
	{Name: "integer beyond double precision", Method: "POST", Path: "/v1/transfers", ContentType: "application/json", Body: `{"amount_minor":9007199254740993,"to":"acct-1"}`},
	{Name: "its double, exact", Method: "POST", Path: "/v1/transfers", ContentType: "application/json", Body: `{"to":"acct-1", "amount_minor":9007199254740992}`},
	{Name: "large integer beyond double precision", Method: "POST", Path: "/v1/big", ContentType: "application/json", Body: `[123456789012345678901234]`},
	{Name: "double written with all its digits", Method: "POST", Path: "/v1/big", ContentType: "application/json", Body: `[18446744073709551616]`},
	{Name: "double written as JCS writes it", Method: "POST", Path: "/v1/big", ContentType: "application/json", Body: `[18446744073709552000]`},
	{Name: "decimal beyond double precision", Method: "POST", Path: "/v1/n", ContentType: "application/json", Body: `{"price": 0.10000000000000001}`},
	{Name: "inexact number nested", Method: "POST", Path: "/v1/n", ContentType: "application/json", Body: `{"a":[{"b":1.00000000000000000000001}],"c":1}`},
	{Name: "underflow to zero", Method: "POST", Path: "/v1/n", ContentType: "application/json", Body: `[1e-400]`},
	{Name: "underflow with a long exponent", Method: "POST", Path: "/v1/n", ContentType: "application/json", Body: `[1e-99999999999999999999]`},
	{Name: "zero spellings", Method: "POST", Path: "/v1/n", ContentType: "application/json", Body: `[0.0, -0, 0e-99999999999999999999, -0.000E+5, 0E0]`},
	{Name: "exact spellings", Method: "POST", Path: "/v1/n", ContentType: "application/json", Body: `[1E2, 100.0, 1.5e-7, 0.000001000, 12.50e1, 4.35, 0.30000000000000004]`},
}

const vectorsPath = "testdata/fingerprint-vectors.json"

func TestFingerprintVectors(t *testing.T) {
	t.Parallel()
	if *update {
		out := make([]fingerprintVector, len(vectorInputs))
		for i, v := range vectorInputs {
			fp := receiver.Fingerprint(v.Method, v.Path, v.ContentType, []byte(v.Body))
			v.Canonical = string(receiver.CanonicalBody(v.ContentType, []byte(v.Body)))
			v.Fingerprint = hex.EncodeToString(fp[:])
			out[i] = v
		}
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.FromSlash(vectorsPath), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(filepath.FromSlash(vectorsPath))
	if err != nil {
		t.Fatal(err)
	}
	var vs []fingerprintVector
	if err := json.Unmarshal(raw, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) < len(vectorInputs) {
		t.Fatalf("%d vectors in %s, want %d", len(vs), vectorsPath, len(vectorInputs))
	}
	for _, v := range vs {
		fp := receiver.Fingerprint(v.Method, v.Path, v.ContentType, []byte(v.Body))
		if got := hex.EncodeToString(fp[:]); got != v.Fingerprint {
			t.Errorf("%s: fingerprint %s, want %s", v.Name, got, v.Fingerprint)
		}
		if got := string(receiver.CanonicalBody(v.ContentType, []byte(v.Body))); got != v.Canonical {
			t.Errorf("%s: canonical %q, want %q", v.Name, got, v.Canonical)
		}
	}
}

// Two JSON bodies that differ only in a number beyond double precision are
// two requests, while spellings of one value stay one request.
func TestFingerprintExactNumbers(t *testing.T) {
	t.Parallel()
	fp := func(body string) [32]byte {
		return receiver.Fingerprint("POST", "/v1/transfers", "application/json", []byte(body))
	}
	for _, pair := range [][2]string{
		{`{"amount_minor":9007199254740993,"to":"acct-1"}`, `{"amount_minor":9007199254740992,"to":"acct-1"}`},
		{`[0.10000000000000001]`, `[0.1]`},
		{`[18446744073709551616]`, `[18446744073709552000]`},
		{`[1e-400]`, `[0]`},
	} {
		if fp(pair[0]) == fp(pair[1]) {
			t.Errorf("%s and %s have one fingerprint", pair[0], pair[1])
		}
	}
	for _, pair := range [][2]string{
		{`{"amount_minor":9007199254740992,"to":"acct-1"}`, `{ "to":"acct-1","amount_minor":9.007199254740992e15}`},
		{`[0.1, 1e23, -0]`, `[1e-1,100000000000000000000000,0.0]`},
	} {
		if fp(pair[0]) != fp(pair[1]) {
			t.Errorf("%s and %s have different fingerprints", pair[0], pair[1])
		}
	}
}

// Same key, a body that differs only in a number beyond double precision:
// a payload mismatch, not a replay of the first answer.
func TestLargeNumberBodyIsAnotherRequest(t *testing.T) {
	t.Parallel()
	f := newFixture(t, receiver.Options{}, nil)
	wantStatus(t, f.post("k", `{"amount_minor":9007199254740993,"to":"acct-1"}`), http.StatusCreated)
	wantProblem(t, f.post("k", `{"amount_minor":9007199254740992,"to":"acct-1"}`), http.StatusConflict, "payload-mismatch")
	wantStatus(t, f.post("k", `{"amount_minor":9007199254740993,"to":"acct-1"}`), http.StatusOK)
	f.wantRuns(1)
}
