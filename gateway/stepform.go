package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/drainer-io/drainer/internal/jsonexact"
	"github.com/gowebpki/jcs"
)

// StepForm returns the canonical form of a call's arguments (a JSON
// object) that AutoStepID hashes: their RFC 8785 (JCS) form when every
// number in them is exact as a double, else their exact form (exactForm).
// JCS writes a number as the shortest text of the IEEE 754 double it reads
// as, which would make {"id":9007199254740993} and {"id":9007199254740992}
// one step (and one row), while the payload keeps each number as sent and
// drainer.enqueue compares numbers as exact decimals. The test of exactness
// is the receiver's (receiver.CanonicalBody, docs/receiver.md): a number is
// exact when its decimal value is the value of the text JCS writes for it
// (0.1, 1e23, 1.0 are; 9007199254740993, 0.10000000000000001, 1e-400 are
// not). Arguments that are not strict JSON (a duplicate member name, a lone
// surrogate, a number out of double range) have no canonical form.
func StepForm(args []byte) ([]byte, error) {
	canon, err := jcs.Transform(args)
	if err != nil {
		return nil, fmt.Errorf("tools/call arguments are not canonical JSON: %v", err)
	}
	if jsonexact.NumbersExact(args) {
		return canon, nil
	}
	return exactForm(args)
}

// exactForm is the canonical form of arguments holding a number that is
// not exact as a double: the JSON value with its object members sorted by
// name and every number written as its exact decimal value (exactNumber),
// so that equal values (key order, spacing, 1.0 and 1, \u00e9 and é) give
// the same bytes and different numbers different bytes. It never equals a
// JCS form: it holds a number JCS never writes (one a double does not hold
// exactly).
func exactForm(args []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("tools/call arguments are not JSON: %v", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	// encoding/json writes a map's members sorted by name.
	if err := enc.Encode(exactNumbers(v)); err != nil {
		return nil, fmt.Errorf("tools/call arguments: %v", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// exactNumbers replaces every number of v (decoded with UseNumber) by its
// exact decimal value (exactNumber).
func exactNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = exactNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = exactNumbers(e)
		}
	case json.Number:
		return exactNumber(string(x))
	}
	return v
}

// exactNumber writes the value of the JSON number text as "0" (zero, of
// either sign) or sign, "0.", its significant digits and "e" with the
// decimal point's position (0.0120 is 0.12e-1, 9007199254740993 is
// 0.9007199254740993e16): one text per value.
func exactNumber(text string) json.Number {
	v, ok := jsonexact.Value(text)
	if !ok {
		return json.Number(text) // an exponent of more than maxExponentDigits digits: as written
	}
	digits, point, _ := strings.Cut(v, "e")
	if digits == "0" {
		return "0"
	}
	sign := ""
	if strings.HasPrefix(digits, "-") {
		sign, digits = "-", digits[1:]
	}
	return json.Number(sign + "0." + digits + "e" + point)
}
