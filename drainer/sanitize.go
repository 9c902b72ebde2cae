package drainer

import (
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
)

// maxErrorBytes bounds last_error.
const maxErrorBytes = 2048

// cleanText makes s storable in a text column: valid UTF-8, no NUL, bounded.
func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	if len(s) > maxErrorBytes {
		cut := maxErrorBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// cleanJSON makes raw storable in a jsonb column: jsonb rejects invalid
// JSON, a \u0000 escape and an unpaired surrogate escape, so such an answer
// is kept as its text instead ({"body": "<text>", "truncated": false}, as
// dispatch.ResponseJSON keeps a body that is no JSON). An answer already so
// kept is storable, and stays as it is: the text \u0000 in a string is no
// escape.
func cleanJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	if dispatch.JSONBStorable(raw) {
		return raw
	}
	return dispatch.ResponseJSON("text/plain", raw, 6*len(raw)) // room for every byte escaped: never cut
}

// sanitize applies cleanText and cleanJSON to a completion.
func (c *completion) sanitize() {
	if c.LastError != nil {
		s := cleanText(*c.LastError)
		c.LastError = &s
	}
	c.Response = cleanJSON(c.Response)
	if c.Status == outbox.StatusSucceeded && c.Response == nil {
		c.Response = json.RawMessage("null")
	}
	if c.problem != nil {
		p := *c.problem
		p.Type, p.Title, p.Detail, p.Instance = cleanText(p.Type), cleanText(p.Title), cleanText(p.Detail), cleanText(p.Instance)
		c.Problem, _ = json.Marshal(p)
	}
}
