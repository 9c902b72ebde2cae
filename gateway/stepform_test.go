package gateway

import (
	"testing"
)

// TestAutoStepIDKeepsNumbersExact: the derived step id of two calls is the
// same exactly when their arguments are equal JSON values: key order,
// spacing, number spelling (1, 1.0, 1e0) and string escapes do not count,
// while numbers that differ only past a double's precision do. Before, the
// step id hashed the RFC 8785 form, where 9007199254740993 reads as the
// double 9007199254740992: the second call was answered as the first's
// replay. Arguments whose numbers are all exact keep the step id they had.
func TestAutoStepIDKeepsNumbersExact(t *testing.T) {
	step := func(args string) string {
		t.Helper()
		_, canon, err := callArgs([]byte(args))
		if err != nil {
			t.Fatalf("arguments %s: %v", args, err)
		}
		return AutoStepID("charge", canon)
	}
	same := [][]string{
		{`{"a":1,"b":"x"}`, `{"b":"x","a":1}`, `{ "a" : 1.0 , "b" : "x" }`, `{"a":1e0,"b":"\u0078"}`, `{"a":10E-1,"b":"x"}`},
		{`{"s":"é"}`, `{"s":"\u00e9"}`},
		{`{"id":9007199254740993,"p":0.1}`, `{"p":0.1,"id":9007199254740993}`, `{"p":1.0e-1, "id":9007199254740993.00}`, `{"id":90071992547409930e-1,"p":0.10}`},
		{`{"n":[12345678901234567890,{"z":1,"a":"\u00e9"}]}`, `{"n":[1.2345678901234567890e19,{"a":"é","z":1.0}]}`},
		{`{"x":-0}`, `{"x":0}`, `{"x":0.0e5}`},
		{`{}`, ``, `null`},
	}
	for _, group := range same {
		for _, args := range group[1:] {
			if a, b := step(group[0]), step(args); a != b {
				t.Errorf("%s and %s: step ids %s and %s; want one", group[0], args, a, b)
			}
		}
	}
	distinct := []string{
		`{"id":9007199254740993}`, `{"id":9007199254740992}`, `{"id":9007199254740994}`,
		`{"id":12345678901234567890}`, `{"id":12345678901234567000}`, `{"id":12345678901234567891}`,
		`{"p":0.1}`, `{"p":0.10000000000000001}`,
		`{"x":1e-400}`, `{"x":0}`,
		`{"id":"9007199254740993"}`, `{"id":[9007199254740993]}`,
	}
	seen := map[string]string{}
	for _, args := range distinct {
		id := step(args)
		if prev, ok := seen[id]; ok {
			t.Errorf("%s and %s share step id %s; want two", prev, args, id)
		}
		seen[id] = args
	}
	// Exact arguments keep the step id of the RFC 8785 form.
	if got, want := step(`{"b":"x","a":1.0}`), AutoStepID("charge", []byte(`{"a":1,"b":"x"}`)); got != want {
		t.Errorf("step id of exact arguments %s, want %s (their RFC 8785 form's)", got, want)
	}
	// The payload is the arguments as sent, compacted: numbers as written.
	payload, _, err := callArgs([]byte(` {"id": 9007199254740993, "p" : 0.10} `))
	if err != nil || string(payload) != `{"id":9007199254740993,"p":0.10}` {
		t.Errorf("payload %s (%v); want the arguments as sent, compacted", payload, err)
	}
	for _, bad := range []string{`[1]`, `{"a":1,"a":2}`, `{"a":1e400}`, `{"a":`} {
		if _, _, err := callArgs([]byte(bad)); err == nil {
			t.Errorf("arguments %s taken; want them refused", bad)
		}
	}
}
