package receiver

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"strconv"
	"strings"

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
	if err != nil || !numbersExact(body) {
		return body
	}
	return c
}

// numbersExact reports whether every number of the JSON text body has the
// exact value of the text JCS writes for it.
func numbersExact(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return true
		}
		if err != nil {
			return false
		}
		if n, ok := tok.(json.Number); ok && !numberExact(string(n)) {
			return false
		}
	}
}

// numberExact reports whether the JSON number text has the exact value of
// the shortest text of the double it reads as (the digits JCS writes).
func numberExact(text string) bool {
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return false
	}
	want, ok := decimalValue(text)
	got, _ := decimalValue(strconv.FormatFloat(f, 'e', -1, 64))
	return ok && want == got
}

// maxExponentDigits bounds the exponent decimalValue reads: a number with
// a longer one (leading zeros aside) is out of double range or not exact.
const maxExponentDigits = 9

// decimalValue returns a form of the decimal number text (JSON grammar, or
// Go's 'e' format) that two texts share exactly when their values are equal:
// "0" for zero (of either sign), else the sign, the significant digits
// without leading or trailing zeros, "e" and the position of the decimal
// point relative to the first of them (so 0.0120 is "12e-1"). It reports
// false for a nonzero number whose exponent has more than
// maxExponentDigits digits.
func decimalValue(text string) (string, bool) {
	sign := ""
	if strings.HasPrefix(text, "-") {
		sign, text = "-", text[1:]
	}
	mantissa, exp, _ := strings.Cut(strings.ToLower(text), "e")
	whole, frac, _ := strings.Cut(mantissa, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	if digits == "" {
		return "0", true
	}
	point := len(whole) - (len(whole+frac) - len(digits))
	if exp != "" {
		expSign := 1
		switch exp[0] {
		case '-':
			expSign, exp = -1, exp[1:]
		case '+':
			exp = exp[1:]
		}
		exp = strings.TrimLeft(exp, "0")
		if len(exp) > maxExponentDigits {
			return "", false
		}
		e, _ := strconv.Atoi("0" + exp)
		point += expSign * e
	}
	return sign + strings.TrimRight(digits, "0") + "e" + strconv.Itoa(point), true
}

// isJSON reports whether a Content-Type names JSON.
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}
