package receiver

import (
	"crypto/sha256"
	"mime"
	"strings"

	"github.com/drainer-io/drainer/internal/jsonexact"
	"github.com/gowebpki/jcs"
)

// Fingerprint returns the SHA-256 a record keeps of its request: over
// METHOD "\n" PATH "\n" BODY, where METHOD is upper case, PATH the request
// path as received without the query, and BODY the RFC 8785 (JCS) canonical
// form of the body when contentType is JSON (application/json or a +json
// type) and the body parses as JSON with every number exact as a double
// (see CanonicalBody), else the body's bytes unchanged. Key order,
// whitespace and number spelling (1.0 and 1) of a JSON body do not change
// the fingerprint; a different number value always does. The Python and
// TypeScript receivers compute the same bytes.
func Fingerprint(method, path, contentType string, body []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(strings.ToUpper(method)))
	h.Write([]byte{'\n'})
	h.Write([]byte(path))
	h.Write([]byte{'\n'})
	h.Write(CanonicalBody(contentType, body))
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// CanonicalBody returns the body as the fingerprint sees it: JCS canonical
// JSON for a JSON body that parses, else the bytes unchanged. JCS writes a
// number as the shortest text of the IEEE 754 double it reads as, which
// would make 9007199254740993 and 9007199254740992 one request; so a body
// with a number whose value differs from the value of the text JCS writes
// for it (as 9007199254740993, 0.10000000000000001 and 1e-400 do; 0.1 and
// 1e23 do not) has no canonical form either, like a number out of range.
func CanonicalBody(contentType string, body []byte) []byte {
	if !isJSON(contentType) {
		return body
	}
	c, err := jcs.Transform(body)
	if err != nil || !jsonexact.NumbersExact(body) {
		return body
	}
	return c
}

// isJSON reports whether a Content-Type names JSON.
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}
