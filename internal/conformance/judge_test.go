package conformance

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// ans builds an answer: status, body and header pairs.
func ans(status int, body string, kv ...string) Answer {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return Answer{Status: status, Header: h, Body: []byte(body)}
}

func TestJudgeFirstWrite(t *testing.T) {
	t.Parallel()
	cases := []struct {
		a    Answer
		pass bool
		seen string
	}{
		{ans(201, `{}`, "Idempotency-Replay", "false"), true, "201, Idempotency-Replay: false"},
		{ans(200, `{}`), true, "200, 2-byte body"},
		{ans(200, `{}`, "Idempotency-Replay", "true"), false, "a fresh key answered as a replay (Idempotency-Replay: true)"},
		{ans(200, `{}`, "Idempotent-Replayed", "true"), false, "as a replay"},
		{ans(200, `{}`, "Idempotency-Replay", "maybe"), false, "Idempotency-Replay: maybe"},
		{ans(500, ``), false, "500"},
		{ans(400, `{"detail":"qty missing"}`, "Content-Type", "application/problem+json"), false, `"qty missing" (does the endpoint accept the payload?`},
		{Answer{Err: errors.New("connection refused")}, false, "no answer (connection refused)"},
	}
	for _, c := range cases {
		r := judgeFirstWrite(c.a)
		if r.Passed != c.pass || !strings.Contains(r.Seen, c.seen) || r.Name != CheckFirstWrite {
			t.Errorf("%+v: got %s; want passed=%v and %q", c.a, r.Line(), c.pass, c.seen)
		}
	}
}

func TestJudgeReplay(t *testing.T) {
	t.Parallel()
	first := ans(201, `{"id":"x"}`, "Content-Type", "application/json", "Idempotency-Replay", "false")
	cases := []struct {
		m     Mode
		again Answer
		pass  bool
		seen  string
	}{
		{ModeSeed, ans(200, `{"id":"x"}`, "Content-Type", "application/json", "Idempotency-Replay", "true"), true, "identical"},
		{ModeSeed, ans(201, `{"id":"x"}`, "Content-Type", "application/json", "Idempotency-Replay", "true"), false, "status 201, want 200"},
		{ModeIETF, ans(201, `{"id":"x"}`, "Content-Type", "application/json", "Idempotent-Replayed", "true"), true, "identical"},
		{ModeIETF, ans(200, `{"id":"x"}`, "Content-Type", "application/json", "Idempotency-Replay", "true"), false, "status 200, want 201"},
		{ModeSeed, ans(200, `{"id":"x"}`, "Content-Type", "application/json", "Idempotent-Replayed", "true"), false, "no Idempotency-Replay: true"},
		{ModeSeed, ans(200, `{"id":"x"}`, "Content-Type", "application/json"), false, "no Idempotency-Replay: true"},
		{ModeIETF, ans(201, `{"id":"x"}`, "Content-Type", "application/json"), false, "no replay marker"},
		{ModeSeed, ans(200, `{"id":"y"}`, "Content-Type", "application/json", "Idempotency-Replay", "true"), false, "first difference at byte 7"},
		{ModeSeed, ans(200, `{"id":"x"}`, "Content-Type", "text/plain", "Idempotency-Replay", "true"), false, `Content-Type "text/plain"`},
		{ModeSeed, Answer{Err: errors.New("reset")}, false, "no answer"},
	}
	for _, c := range cases {
		r := judgeReplay(c.m, first, c.again)
		if r.Passed != c.pass || !strings.Contains(r.Seen, c.seen) {
			t.Errorf("%s %+v: got %s; want passed=%v and %q", c.m, c.again, r.Line(), c.pass, c.seen)
		}
	}
	if r := judgeReplay(ModeSeed, ans(500, ""), Answer{}); r.Passed || !strings.Contains(r.Seen, "not run") {
		t.Errorf("replay after a failed first write: %s", r.Line())
	}
}

func TestJudgePayloadMismatch(t *testing.T) {
	t.Parallel()
	first := ans(201, `{}`)
	cases := []struct {
		m    Mode
		a    Answer
		pass bool
		seen string
	}{
		{ModeSeed, ans(409, ``, "Idempotency-Conflict", "payload-mismatch"), true, "409"},
		{ModeSeed, ans(409, ``), false, "without Idempotency-Conflict: payload-mismatch"},
		{ModeSeed, ans(422, ``), false, "want 409"},
		{ModeIETF, ans(422, ``), true, "422"},
		{ModeIETF, ans(409, ``, "Idempotency-Conflict", "payload-mismatch"), false, "want 422"},
		{ModeSeed, ans(200, `{}`, "Idempotency-Replay", "true"), false, "got the stored answer"},
		{ModeSeed, ans(201, `{}`), false, "ran as a new request"},
	}
	for _, c := range cases {
		r := judgePayloadMismatch(c.m, first, c.a)
		if r.Passed != c.pass || !strings.Contains(r.Seen, c.seen) {
			t.Errorf("%s %+v: got %s; want passed=%v and %q", c.m, c.a, r.Line(), c.pass, c.seen)
		}
	}
}

func TestInFlightShape(t *testing.T) {
	t.Parallel()
	cases := []struct {
		m       Mode
		a       Answer
		problem string // "" when well formed
	}{
		{ModeSeed, ans(409, ``, "Idempotency-Conflict", "in-flight", "Retry-After", "1"), ""},
		{ModeSeed, ans(425, ``, "Idempotency-Conflict", "in-flight", "Retry-After", "1"), ""},
		{ModeSeed, ans(409, ``, "Idempotency-Conflict", "in-flight", "Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT"), ""},
		{ModeIETF, ans(409, ``, "Retry-After", "1"), ""},
		{ModeIETF, ans(425, ``, "Retry-After", "1"), "not 409"},
		{ModeSeed, ans(409, ``, "Retry-After", "1"), "no Idempotency-Conflict: in-flight"},
		{ModeSeed, ans(409, ``, "Idempotency-Conflict", "in-flight"), "no Retry-After"},
		{ModeSeed, ans(409, ``, "Idempotency-Conflict", "in-flight", "Retry-After", "soon"), `Retry-After "soon"`},
		{ModeIETF, ans(409, ``, "Idempotency-Conflict", "payload-mismatch", "Retry-After", "1"), "payload-mismatch on an identical request"},
		{ModeSeed, ans(503, ``, "Retry-After", "1"), "not 409 (or 425)"},
	}
	for _, c := range cases {
		got := inFlightProblem(c.m, c.a)
		if (c.problem == "") != (got == "") || !strings.Contains(got, c.problem) {
			t.Errorf("%s %+v: problem %q, want %q", c.m, c.a, got, c.problem)
		}
	}
}

func TestJudgeBursts(t *testing.T) {
	t.Parallel()
	fw := ans(201, `{"id":1}`)
	rp := ans(200, `{"id":1}`, "Idempotency-Replay", "true")
	other := ans(200, `{"id":2}`, "Idempotency-Replay", "true")
	inf := ans(409, ``, "Idempotency-Conflict", "in-flight", "Retry-After", "1")
	noRA := ans(409, ``, "Idempotency-Conflict", "in-flight")
	cases := []struct {
		name             string
		b                burst
		inFlight, effect bool
		seen             string
	}{
		{"correct", burst{[]Answer{fw, rp, inf, inf}, rp}, true, true, "1 first write, 1 replays, 2 in flight"},
		{"serialised", burst{[]Answer{fw, rp, rp}, rp}, true, true, "not observed"},
		{"twice", burst{[]Answer{fw, fw, inf}, rp}, false, false, "2 effects from one key"},
		{"no retry-after", burst{[]Answer{fw, noRA}, rp}, false, true, "no Retry-After"},
		{"replay differs", burst{[]Answer{fw, other}, rp}, true, false, "1 replays differ"},
		{"settle in flight", burst{[]Answer{fw, inf}, inf}, true, false, "a retry after the burst got 409"},
		{"settle differs", burst{[]Answer{fw, rp}, other}, true, false, "replayed a body other than"},
		{"none succeeded", burst{[]Answer{ans(500, ``), ans(500, ``)}, ans(500, ``)}, false, false, "no request succeeded (2× 500"},
	}
	for _, c := range cases {
		in := judgeInFlight(ModeSeed, []burst{c.b})
		eff := judgeOneEffect(ModeSeed, []burst{c.b})
		if in.Passed != c.inFlight || eff.Passed != c.effect {
			t.Errorf("%s: in-flight %v (%s), one-effect %v (%s); want %v, %v", c.name, in.Passed, in.Seen, eff.Passed, eff.Seen, c.inFlight, c.effect)
		}
		if !strings.Contains(in.Seen+" | "+eff.Seen, c.seen) {
			t.Errorf("%s: seen %q | %q, want %q", c.name, in.Seen, eff.Seen, c.seen)
		}
	}
}

func TestReportOutput(t *testing.T) {
	t.Parallel()
	rep := Report{URL: "http://x/", Method: "POST", Mode: ModeSeed, Concurrency: 2, Checks: []Result{
		{Name: CheckFirstWrite, Passed: true, Seen: "201"},
		{Name: CheckReplay, Seen: "no Idempotency-Replay: true"},
	}}
	var b strings.Builder
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if want := "PASS first-write: 201\nFAIL replay: no Idempotency-Replay: true\n"; b.String() != want {
		t.Fatalf("text %q, want %q", b.String(), want)
	}
	b.Reset()
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"url", "method", "mode", "concurrency", "passed", "checks"} {
		if _, ok := got[f]; !ok {
			t.Errorf("JSON report has no %q: %s", f, b.String())
		}
	}
	check := got["checks"].([]any)[1].(map[string]any)
	if check["name"] != "replay" || check["passed"] != false || check["seen"] != "no Idempotency-Replay: true" {
		t.Errorf("JSON check %v", check)
	}
}
