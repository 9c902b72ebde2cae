package stripe

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

func TestFormEncode(t *testing.T) {
	tests := []struct {
		name, payload, want string
	}{
		{"flat, sorted", `{"currency":"eur","amount":1250,"capture":false}`, "amount=1250&capture=false&currency=eur"},
		{"nested object", `{"metadata":{"order":"A-17","b":"2"}}`, "metadata%5Bb%5D=2&metadata%5Border%5D=A-17"},
		{"array", `{"payment_method_types":["card","sepa_debit"]}`, "payment_method_types%5B0%5D=card&payment_method_types%5B1%5D=sepa_debit"},
		{"array of objects", `{"items":[{"price":"p_1","quantity":2}]}`, "items%5B0%5D%5Bprice%5D=p_1&items%5B0%5D%5Bquantity%5D=2"},
		{"nulls left out, arrays renumbered", `{"a":null,"b":[null,"x",null,"y"],"c":"z"}`, "b%5B0%5D=x&b%5B1%5D=y&c=z"},
		{"empty containers left out", `{"a":{},"b":[],"c":""}`, "c="},
		{"numbers as written", `{"a":1e3,"b":0.10,"c":-0,"d":12345678901234567890}`, "a=1e3&b=0.10&c=-0&d=12345678901234567890"},
		{"escaping", `{"description":"a&b=c d+é","k&=":"v"}`, "description=a%26b%3Dc+d%2B%C3%A9&k%26%3D=v"},
		{"empty object", `{}`, ""},
		{"whitespace", " \n{\"a\": true}\n ", "a=true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FormEncode([]byte(tt.payload))
			if err != nil {
				t.Fatalf("FormEncode: %v", err)
			}
			if got != tt.want {
				t.Errorf("FormEncode(%s)\n got %s\nwant %s", tt.payload, got, tt.want)
			}
		})
	}
}

func TestFormEncodeErrors(t *testing.T) {
	const secret = "s3cr3t-payload"
	deep := strings.Repeat(`{"a":`, maxFormDepth+1) + `"x"` + strings.Repeat("}", maxFormDepth+1)
	deepArray := `{"a":` + strings.Repeat("[", maxFormDepth) + `"x"` + strings.Repeat("]", maxFormDepth) + "}"
	big := `{"a":"` + strings.Repeat("x", maxFormBytes) + `"}`
	tests := []struct{ name, payload, want string }{
		{"not JSON", `{"a":"` + secret + `"`, "not valid JSON"},
		{"garbage", secret, "not valid JSON"},
		{"trailing data", `{"a":1} {"b":"` + secret + `"}`, "data after the JSON value"},
		{"array", `["` + secret + `"]`, "got an array"},
		{"string", `"` + secret + `"`, "got a string"},
		{"null", `null`, "got null"},
		{"number", `12`, "got a number"},
		{"empty name", `{"":"` + secret + `"}`, "parameter names must be non-empty"},
		{"bracket in name", `{"a[b]":"` + secret + `"}`, "must not contain '[' or ']'"},
		{"nested bracket", `{"m":{"x]":1}}`, "must not contain"},
		{"too deep", deep, "nested deeper than 32 levels"},
		{"too deep array", deepArray, "nested deeper than 32 levels"},
		{"too big", big, "would exceed 1048576 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FormEncode([]byte(tt.payload))
			if err == nil {
				t.Fatalf("FormEncode = %q, want an error", got)
			}
			if !errors.Is(err, ErrInvalidPayload) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want ErrInvalidPayload containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error reveals the payload: %q", err)
			}
		})
	}
	// The limit counts the top-level object and is inclusive.
	ok := strings.Repeat(`{"a":`, maxFormDepth) + `"x"` + strings.Repeat("}", maxFormDepth)
	if _, err := FormEncode([]byte(ok)); err != nil {
		t.Errorf("%d levels refused: %v", maxFormDepth, err)
	}
}

// FuzzFormEncode: FormEncode never panics; its output always parses as a
// query string with one pair per scalar leaf; a flat object of scalars
// round-trips through url.ParseQuery.
func FuzzFormEncode(f *testing.F) {
	for _, seed := range []string{
		`{"amount":1250,"currency":"eur"}`, `{"metadata":{"a":"b"},"x":[1,{"y":null}]}`,
		`{"a&b":"c=d","e":"f g"}`, `{"":1}`, `[]`, `{"a":1e999}`, "{\"a\":\"\xff\"}", `{"a":true,"b":false}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		out, err := FormEncode(payload)
		if err != nil {
			if !errors.Is(err, ErrInvalidPayload) {
				t.Fatalf("error %v does not wrap ErrInvalidPayload", err)
			}
			return
		}
		values, err := url.ParseQuery(out)
		if err != nil {
			t.Fatalf("output %q does not parse: %v", out, err)
		}
		dec := json.NewDecoder(bytes.NewReader(payload))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil {
			t.Fatalf("FormEncode accepted invalid JSON %q", payload)
		}
		pairs := 0
		for _, vs := range values {
			pairs += len(vs)
		}
		if want := leaves(v); pairs != want {
			t.Fatalf("%d pairs in %q, want one per scalar leaf (%d)", pairs, out, want)
		}
		obj, _ := v.(map[string]any)
		for k, val := range obj {
			var want string
			switch val := val.(type) {
			case string:
				want = val
			case bool:
				want = strconv.FormatBool(val)
			case json.Number:
				want = val.String() // as written in the payload
			default:
				continue // null and containers: not flat
			}
			if got := values[k]; len(got) != 1 || got[0] != want {
				t.Fatalf("key %q: got %q, want [%q]", k, got, want)
			}
		}
	})
}

// leaves counts the non-null scalars of a decoded JSON value.
func leaves(v any) int {
	switch v := v.(type) {
	case nil:
		return 0
	case map[string]any:
		n := 0
		for _, e := range v {
			n += leaves(e)
		}
		return n
	case []any:
		n := 0
		for _, e := range v {
			n += leaves(e)
		}
		return n
	}
	return 1
}
