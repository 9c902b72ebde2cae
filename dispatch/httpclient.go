package dispatch

import (
	"net"
	"net/http"
	"time"
)

// maxIdleConnsPerHost keeps enough idle connections for a full worker pool
// calling one provider.
const maxIdleConnsPerHost = 128

// NewHTTPClient returns the client HTTP-based adapters use: its own pooled
// transport (rt when given, for tests), the proxy from the environment, and
// redirects never followed: a redirect is a terminal answer (CONTRACT §5),
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
		Transport:     rt,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
