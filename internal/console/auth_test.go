package console

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzLocalPath: whatever next is, the address kept is the console's root
// or next itself, and a browser reading it (tabs and newlines dropped,
// backslashes read as slashes, as the URL standard does) stays on the
// console's origin.
func FuzzLocalPath(f *testing.F) {
	for _, s := range []string{"/parked", "/rows?status=failed&search=a%20b", "/runs/a%2Fb%20c", "", "/",
		"/\t/evil.example/", "/\n/evil.example", "/\\evil.example", "//evil.example", "https://evil.example",
		"/%2F%2Fevil.example", "/%5Cevil", "/%09/evil.example", "javascript:alert(1)", "/\u3000/evil", "/.\t./evil"} {
		f.Add(s)
	}
	base, _ := url.Parse("http://console.example:9754/rows?status=failed")
	f.Fuzz(func(t *testing.T, next string) {
		got := localPath(next)
		if got != "/" && got != next {
			t.Fatalf("localPath(%q) = %q: neither the root nor next", next, got)
		}
		browser := strings.NewReplacer("\t", "", "\n", "", "\r", "", "\\", "/").Replace(got)
		u, err := url.Parse(browser)
		if err != nil {
			t.Fatalf("localPath(%q) = %q, which does not parse: %v", next, got, err)
		}
		if r := base.ResolveReference(u); r.Scheme != "http" || r.Host != base.Host {
			t.Fatalf("localPath(%q) = %q leads a browser to %s", next, got, r)
		}
		if dec, err := url.PathUnescape(u.Path); err == nil && strings.HasPrefix(dec, "//") {
			t.Fatalf("localPath(%q) = %q starts // once decoded", next, got)
		}
	})
}
