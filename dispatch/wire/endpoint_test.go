package wire

import (
	"strings"
	"testing"
)

func TestParseEndpoint(t *testing.T) {
	for raw, want := range map[string]string{
		"https://api.example.com/v1":    "",
		"http://127.0.0.1:8080/mcp?x=1": "",
		"ftp://example.com":             "absolute http",
		"/relative":                     "absolute http",
		"https://user:pw@example.com":   "userinfo",
		"https:///path":                 "host is missing",
		"https://example.com/#frag":     "fragment",
		"https://example.com/#":         "fragment",
		"https://example.com/%zz":       "not a valid URL",
	} {
		u, err := ParseEndpoint(raw)
		switch {
		case want == "" && (err != nil || u == nil):
			t.Errorf("%q: %v, want accepted", raw, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: %v, want an error saying %q", raw, err, want)
		case err != nil && strings.Contains(err.Error(), "pw"):
			t.Errorf("%q: the error quotes the URL: %v", raw, err)
		}
	}
}
