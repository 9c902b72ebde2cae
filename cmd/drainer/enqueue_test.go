package main

import (
	"bytes"
	"context"
	"github.com/drainer-io/drainer/tooling/dbtest"
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

// TestEnqueuePayloadJSONBRefusals: a payload PostgreSQL's jsonb cannot
// store is a usage error (exit 2) naming --payload (and the file or
// standard input), said before anything is sent to the database (the URL
// here is unreachable: reaching it would be exit 1, "connect"): a NUL
// character (\u0000) anywhere in a string or member name, an unpaired
// surrogate escape, and bytes that are not UTF-8 (with their byte offset,
// line and column in what was read). An escaped backslash before "u0000"
// and a surrogate pair are text jsonb stores: they go on to connect.
func TestEnqueuePayloadJSONBRefusals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	nul := writeTemp(t, dir, "nul.json", "{\n  \"note\": \"a\\u0000b\"\n}\n")
	latin1 := writeTemp(t, dir, "latin1.json", "\n\n{\"name\": \"caf\xe9\"}\n")
	ff := writeTemp(t, dir, "ff.json", "{\"a\":\"\xff\"}")
	enqueue := func(payload, stdin string) (int, string) {
		var out, errb bytes.Buffer
		code := executeIn([]string{"enqueue", "--database-url", unreachableURL, "--run", "x", "--step", "1",
			"--tool", "ok", "--scope", "s", "--payload", payload}, strings.NewReader(stdin), &out, &errb)
		return code, errb.String()
	}
	const jsonb = "which PostgreSQL's jsonb cannot store"
	for _, tc := range []struct {
		payload, stdin string
		fragments      []string
	}{
		{`{"a":"\u0000"}`, "", []string{`--payload: payload contains a NUL character (\u0000) at line 1, column 7`, jsonb}},
		{`{"a":["x", {"\u0000k": 1}]}`, "", []string{`--payload: payload contains a NUL character (\u0000) at line 1, column 14`}},
		{"@" + nul, "", []string{"--payload: payload from " + nul + ` contains a NUL character (\u0000) at line 2, column 13`, jsonb}},
		{"-", `{"a": "\u0000"}`, []string{`--payload: payload from standard input contains a NUL character (\u0000)`}},
		{`{"a":"\ud800"}`, "", []string{`--payload: payload contains an unpaired UTF-16 surrogate (\ud800) at line 1, column 7`, jsonb}},
		{`{"a":"\udc00\ud83d"}`, "", []string{`unpaired UTF-16 surrogate (\udc00)`}},
		{"@" + ff, "", []string{"--payload: payload from " + ff + " is not valid UTF-8: byte 0xff at byte offset 6 (line 1, column 7)"}},
		{"@" + latin1, "", []string{"--payload: payload from " + latin1 + " is not valid UTF-8: byte 0xe9 at byte offset 15 (line 3, column 14)"}},
		{"{\"a\":\"\xc3\"}", "", []string{"--payload: payload is not valid UTF-8: byte 0xc3 at byte offset 6 (line 1, column 7)"}},
		{"-", "  {\"a\": \xff}", []string{"--payload: payload from standard input is not valid UTF-8: byte 0xff at byte offset 8 (line 1, column 9)"}},
	} {
		code, errb := enqueue(tc.payload, tc.stdin)
		if code != exitUsage || strings.Contains(errb, "connect") || strings.Contains(errb, "SQLSTATE") {
			t.Errorf("--payload %q: exit %d, stderr %q; want 2 before connecting", tc.payload, code, errb)
			continue
		}
		for _, f := range tc.fragments {
			if !strings.Contains(errb, f) {
				t.Errorf("--payload %q: stderr %q lacks %q", tc.payload, errb, f)
			}
		}
	}
	for _, ok := range []string{`{"a":"\\u0000"}`, `{"a":"\ud83d\ude00 \u00e9"}`, `{"a":"caf` + "\u00e9" + `"}`} {
		if code, errb := enqueue(ok, ""); code != exitRuntime || !strings.Contains(errb, "connect") {
			t.Errorf("--payload %q: exit %d, stderr %q; want it accepted (then exit 1 connecting)", ok, code, errb)
		}
	}
}

// TestEnqueueIntoAbortedRunSaysSo: an intent enqueued into an aborted run
// is created cancelled (docs/reference.md §2): the command prints "KEY
// created" as always, and says on stderr that the row will not be sent.
func TestEnqueueIntoAbortedRunSaysSo(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	d.enqueue("run-gone", "charge_card", 1)
	code, _, errb := d.run("abort", "run-gone", "--reason", "agent gave up", "--actor", "alice")
	want(t, code, errb, 0)
	var out, errOut bytes.Buffer
	code = execute([]string{"enqueue", "--database-url", d.url, "--run", "run-gone", "--step", "late",
		"--tool", "charge_card", "--payload", `{"a":1}`}, &out, &errOut)
	if code != 0 || !strings.HasSuffix(out.String(), " created\n") ||
		!strings.Contains(errOut.String(), "note: run run-gone is aborted: the row was created cancelled and will not be sent") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	code = execute([]string{"enqueue", "--database-url", d.url, "--run", "run-live", "--step", "1",
		"--tool", "charge_card", "--payload", `{"a":1}`}, &out, &errOut)
	if code != 0 || !strings.HasSuffix(out.String(), " created\n") || strings.Contains(errOut.String(), "aborted") {
		t.Fatalf("a live run: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
}

// TestEnqueueIntoAnUnmigratedDatabaseSaysHowToFixIt: an enqueue into a
// database whose schema was never migrated says so and names the command
// that migrates it, as the other commands do, not a bare SQL error.
func TestEnqueueIntoAnUnmigratedDatabaseSaysHowToFixIt(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDatabase(t)
	var out, errOut bytes.Buffer
	code := execute([]string{"enqueue", "--database-url", url, "--run", "r", "--step", "s",
		"--tool", "charge_card", "--payload", `{"a":1}`}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), `schema "drainer" is not migrated: run `+"`drainer migrate --schema drainer`") {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
}
