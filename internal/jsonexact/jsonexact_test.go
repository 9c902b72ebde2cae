package jsonexact

import "testing"

func TestNumbersExact(t *testing.T) {
	for text, want := range map[string]bool{
		`{"a": 1, "b": 1.0, "c": 1e0, "d": -0.5}`: true,
		`{"id": 9007199254740992}`:                true,
		`{"id": 9007199254740993}`:                false,
		`[0.10000000000000001]`:                   false,
		`[1e-400]`:                                false,
		`{"s": "9007199254740993"}`:               true, // a string, not a number
	} {
		if got := NumbersExact([]byte(text)); got != want {
			t.Errorf("NumbersExact(%s) = %v, want %v", text, got, want)
		}
	}
}

func TestValue(t *testing.T) {
	for text, want := range map[string]string{
		"0.0120": "12e-1", "12e-3": "12e-1", "-0": "0", "0e10": "0",
		"9007199254740993": "9007199254740993e16", "1.5E+2": "15e3",
	} {
		if got, ok := Value(text); !ok || got != want {
			t.Errorf("Value(%s) = %q, %v; want %q", text, got, ok, want)
		}
	}
	if _, ok := Value("1e1234567890"); ok {
		t.Error("an exponent past maxExponentDigits was read")
	}
}
