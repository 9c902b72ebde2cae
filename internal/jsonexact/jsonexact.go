// Package jsonexact tells whether the numbers of a JSON text keep their
// exact value through a double (RFC 8785 writes every number as the double
// it reads as), and gives a number's exact value as text. The receiver's
// fingerprint and the gateway's derived step id share it: a JSON text with
// a number a double cannot hold is compared over another, exact form.
package jsonexact

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
)

// NumbersExact reports whether every number of the JSON text body has the
// exact value of the text JCS writes for it; body must be valid JSON (its
// callers parse it first).
func NumbersExact(body []byte) bool {
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
	want, ok := Value(text)
	got, _ := Value(strconv.FormatFloat(f, 'e', -1, 64))
	return ok && want == got
}

// maxExponentDigits bounds the exponent Value reads: a number with
// a longer one (leading zeros aside) is out of double range or not exact.
const maxExponentDigits = 9

// Value returns a form of the decimal number text (JSON grammar, or
// Go's 'e' format) that two texts share exactly when their values are equal:
// "0" for zero (of either sign), else the sign, the significant digits
// without leading or trailing zeros, "e" and the position of the decimal
// point relative to the first of them (so 0.0120 is "12e-1"). It reports
// false for a nonzero number whose exponent has more than
// maxExponentDigits digits.
func Value(text string) (string, bool) {
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
