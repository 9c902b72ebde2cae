package wire

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// OneLine makes provider text safe for a log line or an error: invalid
// UTF-8 and control or format characters (newlines, bidi overrides) become
// spaces, and the text is cut at a character boundary to at most limit
// bytes, "…" included.
func OneLine(s string, limit int) string {
	s = strings.TrimSpace(strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, " ")))
	if len(s) <= limit {
		return s
	}
	const ellipsis = "…"
	cut := max(limit-len(ellipsis), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.TrimSpace(s[:cut]) + ellipsis
}
