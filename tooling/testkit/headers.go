package testkit

import "net/http"

// Headers is an http.RoundTripper that sets Set on each request (a clone)
// before Base sends it (http.DefaultTransport when nil): an MCP client's
// bearer token and agent headers, in tests.
type Headers struct {
	Base http.RoundTripper
	Set  map[string]string
}

func (h Headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.Set {
		r.Header.Set(k, v)
	}
	if h.Base == nil {
		return http.DefaultTransport.RoundTrip(r)
	}
	return h.Base.RoundTrip(r)
}
