package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnqueuePayloadSources: --payload takes the JSON itself, @FILE or -
// (standard input); each source ends up as the row's payload, and a bad one
// is refused (exit 2) naming the file, or the line and column of invalid JSON.
func TestEnqueuePayloadSources(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	enqueue := func(step, payload, stdin string) (int, string, string) {
		var out, errb bytes.Buffer
		code := executeIn([]string{"enqueue", "--database-url", d.url, "--run", "run-p", "--step", step,
			"--tool", "charge_card", "--payload", payload}, strings.NewReader(stdin), &out, &errb)
		return code, out.String(), errb.String()
	}
	payloadOf := func(step string) string {
		t.Helper()
		var p string
		if err := d.pool.QueryRow(context.Background(), `SELECT payload::text FROM drainer.outbox
		        WHERE agent_run_id = 'run-p' AND step_id = $1`, step).Scan(&p); err != nil {
			t.Fatalf("row of step %s: %v", step, err)
		}
		return p
	}

	good := write("order.json", "{\n  \"amount\": 500,\n  \"currency\": \"eur\"\n}\n")
	code, out, errb := enqueue("from-file", "@"+good, "")
	want(t, code, errb, 0)
	if !strings.HasSuffix(strings.TrimSpace(out), " created") {
		t.Fatalf("enqueue @FILE printed %q", out)
	}
	if p := payloadOf("from-file"); p != `{"amount": 500, "currency": "eur"}` {
		t.Fatalf("payload from file = %s", p)
	}
	code, out, errb = enqueue("from-stdin", "-", `{"amount": 7}`)
	want(t, code, errb, 0)
	if !strings.HasSuffix(strings.TrimSpace(out), " created") || payloadOf("from-stdin") != `{"amount": 7}` {
		t.Fatalf("enqueue -: %q, payload %s", out, payloadOf("from-stdin"))
	}
	// The same tuple and payload again, from stdin: existing.
	code, out, errb = enqueue("from-stdin", "-", "{\"amount\":7}\n")
	want(t, code, errb, 0)
	if !strings.HasSuffix(strings.TrimSpace(out), " existing") {
		t.Fatalf("enqueue - again printed %q", out)
	}

	missing := filepath.Join(dir, "nope.json")
	bad := write("bad.json", "{\n  \"amount\": 500,\n  \"currency\": }\n")
	truncated := write("truncated.json", "{\"amount\": 5")
	empty := write("empty.json", " \n")
	for _, tc := range []struct {
		payload, stdin string
		fragments      []string
	}{
		{"@" + missing, "", []string{"--payload @" + missing, "no such file or directory"}},
		{"@" + dir, "", []string{"--payload @" + dir}},
		{"@", "", []string{"name a file after @"}},
		{"@" + bad, "", []string{"payload from " + bad + " is not valid JSON", "line 3, column 15", "invalid character '}'"}},
		{"@" + truncated, "", []string{"payload from " + truncated + " is not valid JSON", "line 1, column 13", "unexpected end"}},
		{"@" + empty, "", []string{"payload from " + empty + " is empty"}},
		{"-", "", []string{"payload from standard input is empty"}},
		{"-", "{\"a\": 1} {\"b\": 2}", []string{"payload from standard input is not valid JSON", "line 1, column 10", "more data after"}},
		{`{"amount": 12`, "", []string{"--payload: payload is not valid JSON", "line 1, column 14"}},
	} {
		code, _, errb := enqueue("bad", tc.payload, tc.stdin)
		want(t, code, errb, 2, tc.fragments...)
	}
	var n int
	if err := d.pool.QueryRow(context.Background(), `SELECT count(*) FROM drainer.outbox WHERE step_id = 'bad'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("refused payloads left %d rows (%v)", n, err)
	}
}
