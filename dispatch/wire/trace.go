package wire

// ValidTraceparent reports whether s is a W3C traceparent header
// (version-traceid-parentid-flags in lower-case hex; a later version may
// append fields after a "-"). Version ff is invalid. An invalid one is
// dropped rather than failing the request.
func ValidTraceparent(s string) bool {
	if len(s) < 55 || len(s) > 512 || (len(s) > 55 && s[55] != '-') || !ValidHeaderValue(s) {
		return false
	}
	for i := range 55 {
		c := s[i]
		switch i {
		case 2, 35, 52:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return s[:2] != "ff"
}
