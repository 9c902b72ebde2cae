package dispatch

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"time"
)

// maxIdleConnsPerHost keeps enough idle connections for a full worker pool
// (config.DefaultWorkers, 256) calling one provider, with room for more.
const maxIdleConnsPerHost = 512

// NewHTTPClient returns the client HTTP-based adapters use: its own pooled
// transport (rt when given, for tests), the proxy from the environment, and
// redirects never followed: a redirect is a terminal answer (docs/reference.md §5),
// since following it would resend the payload and key to a place nobody
// configured. Per-attempt deadlines come from the caller's context.
func NewHTTPClient(dialTimeout time.Duration, rt http.RoundTripper) *http.Client {
	if rt == nil {
		rt = &http.Transport{
			Proxy:                  http.ProxyFromEnvironment,
			DialContext:            (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:      true,
			MaxIdleConns:           2 * maxIdleConnsPerHost,
			MaxIdleConnsPerHost:    maxIdleConnsPerHost,
			IdleConnTimeout:        90 * time.Second,
			TLSHandshakeTimeout:    min(dialTimeout, 10*time.Second),
			MaxResponseHeaderBytes: 1 << 20,
		}
	}
	return &http.Client{
		Transport:     redirectAnswer{rt},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// redirectAnswer hands a 3xx answer to the client without its Location
// header. The client parses Location before it asks CheckRedirect, and an
// unparsable one ("%", "http://[::1") makes Do fail as if the connection
// had been lost after the request was sent: the engine would then retry
// (or park as outcome_unknown) an answer the contract makes terminal. No
// redirect is ever followed, so the client has no use for it.
type redirectAnswer struct{ base http.RoundTripper }

func (t redirectAnswer) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err == nil && resp.StatusCode/100 == 3 {
		resp.Header.Del("Location")
	}
	return resp, err
}

// Base returns the wrapped transport.
func (t redirectAnswer) Base() http.RoundTripper { return t.base }

// CloseIdleConnections closes the wrapped transport's idle connections.
func (t redirectAnswer) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// NewRequest builds a request that no transport sends twice. Go's
// http.Transport re-sends a request on its own after a connection error on a
// reused keep-alive connection when it thinks the request is replayable: a
// request with a rewindable body (GetBody) and an Idempotency-Key header
// counts as one, and so does any GET. A provider that committed the effect
// and then dropped the connection would then see the request twice, and the
// engine would never learn of the ambiguous first attempt. So every attempt
// on the wire must be one the engine decided and counted: a request with a
// body loses its GetBody (the transport then never rewinds it), and a
// request without one goes out on a fresh connection (the transport only
// re-sends on reused ones).
func NewRequest(ctx context.Context, method, url string, body []byte) (*http.Request, error) {
	if body == nil {
		req, err := http.NewRequestWithContext(ctx, method, url, nil)
		if err != nil {
			return nil, err
		}
		req.Close = true
		return req, nil
	}
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.GetBody = nil
	return req, nil
}
