package dispatch

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{
		"0", "120", "-1", "1.5", "99999999999999999999999", "",
		"Sat, 21 Nov 2026 12:01:30 GMT", "Saturday, 21-Nov-26 12:02:00 GMT", "Sat Nov 21 12:00:10 2026",
		"Mon, 01 Jan 0001 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT",
	} {
		f.Add(s, int64(1795780800))
	}
	f.Fuzz(func(t *testing.T, v string, unix int64) {
		d, ok := ParseRetryAfter(v, time.Unix(unix, 0))
		if d < 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v: negative", v, d)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v, false: want 0 when not ok", v, d)
		}
		if trimmed := strings.TrimSpace(v); ok && trimmed != "" && strings.Trim(trimmed, "0123456789") == "" && d%time.Second != 0 && d != 1<<63-1 {
			t.Fatalf("ParseRetryAfter(%q) = %v: delta-seconds not whole", v, d)
		}
	})
}

func FuzzParseProblem(f *testing.F) {
	f.Add("application/problem+json", []byte(`{"type":"https://x/p","title":"T","status":400,"detail":"D","instance":"/i"}`))
	f.Add("application/problem+json; charset=utf-8", []byte(`{"title":1,"status":"x","detail":null}`))
	f.Add("application/problem+json", []byte(`{"title":"\u202e\n\u0000`+strings.Repeat("é", 700)+`"}`))
	f.Add("application/json", []byte(`{"title":"T"}`))
	f.Add("application/problem+json", []byte(`[`))
	f.Fuzz(func(t *testing.T, ct string, body []byte) {
		p := ParseProblem(ct, body)
		if p == nil {
			return
		}
		if mediaType(ct) != "application/problem+json" {
			t.Fatalf("problem from content type %q", ct)
		}
		if p.Status != 0 && (p.Status < 100 || p.Status > 999) {
			t.Fatalf("status %d kept", p.Status)
		}
		s := p.String()
		if len(s) > 1024 || !utf8.ValidString(s) {
			t.Fatalf("String() is %d bytes, valid UTF-8 %v", len(s), utf8.ValidString(s))
		}
		if i := strings.IndexFunc(s, func(r rune) bool { return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) }); i >= 0 {
			t.Fatalf("String() has a control character at %d: %q", i, s)
		}
		e := NewHTTPError(400, body, p).Error()
		if !utf8.ValidString(e) {
			t.Fatalf("HTTPError not valid UTF-8: %q", e)
		}
	})
}

func FuzzResponseJSON(f *testing.F) {
	f.Add("application/json", []byte(`{"id":"ch_1"}`), 0)
	f.Add("application/json", []byte(`{"a":"\u0000"}`), 0)
	f.Add("application/json", []byte(`["\ud800\u0041"]`), 100)
	f.Add("text/plain", []byte("a\xffb\x00\"\\\n"), 3)
	f.Add("", []byte(" 12 "), 2)
	f.Add("text/html", []byte("é€😀"), 5)
	f.Add("application/x+json", []byte{}, -1)
	f.Fuzz(func(t *testing.T, ct string, body []byte, limit int) {
		limit %= 4096 // keep the bound meaningful for small inputs; <= 0 means the default
		out := ResponseJSON(ct, body, limit)
		if limit <= 0 {
			limit = DefaultResponseLimit
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON: %q", out)
		}
		if len(out) > limit+32 {
			t.Fatalf("%d bytes for limit %d", len(out), limit)
		}
		if !JSONBStorable(out) {
			t.Fatalf("not storable as jsonb: %q", out)
		}
		if bytes.Equal(out, body) {
			return
		}
		var wrapped struct {
			Body      *string `json:"body"`
			Truncated *bool   `json:"truncated"`
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&wrapped); err != nil || wrapped.Body == nil || wrapped.Truncated == nil {
			t.Fatalf("neither the body nor a wrapper: %q (%v)", out, err)
		}
		if !*wrapped.Truncated && utf8.Valid(body) && !bytes.ContainsRune(body, 0) && *wrapped.Body != string(body) {
			t.Fatalf("untruncated text changed: %q -> %q", body, *wrapped.Body)
		}
		if *wrapped.Truncated && len(body) == 0 {
			t.Fatalf("empty body marked truncated")
		}
	})
}
