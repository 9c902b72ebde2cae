package main

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/internal/conformance/conformancetest"
)

// TestConformanceCommand runs the command as a CI job would: exit 0 and one
// PASS line per check against a correct endpoint; exit 1 naming the failed
// check against a broken one; the JSON report with its stable names.
func TestConformanceCommand(t *testing.T) {
	good := httptest.NewServer(conformancetest.New(conformancetest.ModeSeed, conformancetest.FlawNone))
	defer good.Close()
	var out, errOut bytes.Buffer
	if code := execute([]string{"conformance", "--url", good.URL + "/v1/orders", "--payload", `{"sku":"A"}`, "--concurrency", "6"}, &out, &errOut); code != 0 {
		t.Fatalf("correct endpoint: exit %d\nstdout:\n%s\nstderr: %s", code, out.String(), errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{"first-write", "replay", "payload-mismatch", "in-flight", "one-effect", "missing-key", "tuple-mismatch"}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), out.String())
	}
	for i, name := range want {
		if !strings.HasPrefix(lines[i], "PASS "+name+": ") {
			t.Errorf("line %d is %q, want PASS %s: ...", i+1, lines[i], name)
		}
	}

	bad := httptest.NewServer(conformancetest.New(conformancetest.ModeSeed, conformancetest.FlawNoPayloadCheck))
	defer bad.Close()
	out.Reset()
	errOut.Reset()
	t.Setenv("DRAINER_URL", bad.URL)
	if code := execute([]string{"conformance", "--output", "json"}, &out, &errOut); code != 1 {
		t.Fatalf("broken endpoint: exit %d, want 1\nstdout:\n%s\nstderr: %s", code, out.String(), errOut.String())
	}
	if !strings.Contains(errOut.String(), "1 of 7 checks failed") || !strings.Contains(errOut.String(), "payload-mismatch") {
		t.Errorf("stderr %q does not name the failed check", errOut.String())
	}
	var rep struct {
		URL    string `json:"url"`
		Mode   string `json:"mode"`
		Passed bool   `json:"passed"`
		Checks []struct {
			Name   string `json:"name"`
			Passed bool   `json:"passed"`
			Seen   string `json:"seen"`
		} `json:"checks"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("--output json: %v\n%s", err, out.String())
	}
	if rep.Passed || rep.Mode != "seed" || rep.URL != bad.URL || len(rep.Checks) != 7 || rep.Checks[2].Name != "payload-mismatch" || rep.Checks[2].Passed {
		t.Errorf("JSON report %+v", rep)
	}
}

// TestConformanceUsageErrors: bad flags exit 2 naming the flag, and send
// nothing.
func TestConformanceUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"conformance"}, "--url: missing"},
		{[]string{"conformance", "--url", "localhost:8080/x"}, "--url:"},
		{[]string{"conformance", "--url", "ftp://h/x"}, "--url: ftp://h/x: scheme must be http or https"},
		{[]string{"conformance", "--url", "http://127.0.0.1:1/", "--header", "Authorization: Bearer abc"}, `--header (#1): "Authorization…" is not Name=value`},
		{[]string{"conformance", "--url", "http://127.0.0.1:1/", "--header", "Idempotency-Key=k"}, "--header: Idempotency-Key is set by the checks"},
		{[]string{"conformance", "--url", "http://127.0.0.1:1/", "--mode", "strict"}, `--mode: "strict" is not seed or ietf`},
		{[]string{"conformance", "--url", "http://127.0.0.1:1/", "--concurrency", "1"}, "--concurrency: 1 is outside 2..1000"},
		{[]string{"conformance", "--url", "http://127.0.0.1:1/", "--payload", `{"a":`}, "--payload: payload is not valid JSON"},
		{[]string{"conformance", "--url", "http://127.0.0.1:1/", "--output", "yaml"}, `--output: "yaml" is not text or json`},
		{[]string{"conformance", "--url", "http://127.0.0.1:1/", "--timeout", "0s"}, "--timeout: must be positive"},
		{[]string{"conformance", "--url", "http://127.0.0.1:1/", "extra"}, "unknown command"},
		{[]string{"conformance", "--url", "ftp://h/x", "--concurrency", "5000"}, "--url: ftp://h/x: scheme must be http or https\n--concurrency: 5000 is outside 2..1000"},
	} {
		var out, errOut bytes.Buffer
		if code := execute(tc.args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tc.want) || out.Len() != 0 {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want 2 and %q", tc.args, code, errOut.String(), out.String(), tc.want)
		}
		if strings.Contains(errOut.String(), "abc") {
			t.Errorf("%v: stderr shows the header value: %s", tc.args, errOut.String())
		}
	}
	t.Setenv("DRAINER_OUTPUT", "table") // as set for the operator commands: text
	t.Setenv("DRAINER_MODE", "nope")
	var out, errOut bytes.Buffer
	if code := execute([]string{"conformance", "--url", "http://127.0.0.1:1/"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `"nope" is not seed or ietf`) {
		t.Errorf("DRAINER_MODE=nope: exit %d, stderr %q", code, errOut.String())
	}
}
