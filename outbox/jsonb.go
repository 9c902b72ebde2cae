package outbox

import "strconv"

// JSONBRefused returns the byte offset in valid JSON b of the first escape
// a Postgres jsonb column refuses, and why: a \u0000 (NUL), or a UTF-16
// surrogate escape without its other half; -1 when there is none. An
// escaped backslash followed by "u0000" (the text \u0000 in a string) is
// no such escape. b must be valid JSON (json.Valid): the producer API, the
// CLI and the adapters check it first.
func JSONBRefused(b []byte) (off int, why string) {
	// In valid JSON every backslash starts an escape inside a string, and a
	// \u escape is followed by four hex digits.
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		at := i
		i++
		if b[i] != 'u' {
			continue
		}
		r := hex4(b[i+1 : i+5])
		i += 4
		switch {
		case r == 0:
			return at, "a NUL character (\\u0000)"
		case r >= 0xDC00 && r <= 0xDFFF:
			return at, "an unpaired UTF-16 surrogate (" + string(b[at:at+6]) + ")"
		case r >= 0xD800 && r <= 0xDBFF:
			if i+6 >= len(b) || b[i+1] != '\\' || b[i+2] != 'u' {
				return at, "an unpaired UTF-16 surrogate (" + string(b[at:at+6]) + ")"
			}
			if lo := hex4(b[i+3 : i+7]); lo < 0xDC00 || lo > 0xDFFF {
				return at, "an unpaired UTF-16 surrogate (" + string(b[at:at+6]) + ")"
			}
			i += 6
		}
	}
	return -1, ""
}

func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b), 16, 16) // digits are checked by json.Valid
	return rune(n)
}
