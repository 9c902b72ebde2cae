package wire

import "testing"

// TestBearerToken: the scheme's name is case-insensitive (RFC 9110
// §11.1); another scheme, or none, is no bearer token.
func TestBearerToken(t *testing.T) {
	for _, c := range []struct {
		in, token string
		ok        bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"BEARER  abc ", "abc", true},
		{" Bearer abc", "abc", true},
		{"Basic YWJj", "", false},
		{"Bearerabc", "", false},
		{"abc", "", false},
		{"", "", false},
	} {
		if tok, ok := BearerToken(c.in); tok != c.token || ok != c.ok {
			t.Errorf("BearerToken(%q) = %q, %v; want %q, %v", c.in, tok, ok, c.token, c.ok)
		}
	}
}
