package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/idemkey"
)

// This file sends the requests: one at a time, and in bursts over fresh
// connections that are all open before any request is written.

const (
	// barrierWait bounds how long a burst's connections wait for each other
	// before their requests are written anyway.
	barrierWait = 2 * time.Second
	// settleAttempts bounds the retries after a burst while the key is
	// still in flight; each waits Retry-After, at most settleWaitMax.
	settleAttempts = 10
	settleWaitMax  = time.Second
	settleWaitMin  = 50 * time.Millisecond
	// toolName is the tool_name of every tuple the checks send.
	toolName = "drainer-conformance"
	// variantField is the member added to the payload to make it differ.
	variantField = "drainer_conformance_variant"
	userAgent    = "drainer-conformance"
)

// prober sends requests to the one URL of a run.
type prober struct {
	o      Options
	u      *url.URL
	client *http.Client
}

func newProber(o Options, u *url.URL) *prober {
	rt := o.Transport
	if rt == nil {
		rt = &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: o.Timeout}).DialContext,
			ForceAttemptHTTP2:   true,
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     30 * time.Second,
		}
	}
	return &prober{o: o, u: u, client: noRedirects(rt)}
}

// noRedirects returns a client that never follows a redirect: the checks
// send only to the URL given.
func noRedirects(rt http.RoundTripper) *http.Client {
	return &http.Client{
		Transport:     rt,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// close releases the idle connections of p's client.
func (p *prober) close() { p.client.CloseIdleConnections() }

// freshTuple returns a tuple never used before: its key is a fresh random
// key, and its encoding the matching X-Agent-Idempotency-Tuple.
func freshTuple(c Check) idemkey.Tuple {
	return idemkey.Tuple{
		AgentRunID: "conformance-" + rand.Text(),
		StepID:     string(c),
		ToolName:   toolName,
	}
}

// send sends one request with key and tuple (each omitted when "") and
// body, through client, and reads the answer.
func (p *prober) send(ctx context.Context, client *http.Client, key, tuple string, body []byte) Answer {
	ctx, cancel := context.WithTimeout(ctx, p.o.Timeout)
	defer cancel()
	// dispatch.NewRequest: a request the transport never re-sends on its
	// own, so every request counted here was sent exactly once.
	req, err := dispatch.NewRequest(ctx, p.o.Method, p.u.String(), body)
	if err != nil {
		return Answer{Err: err}
	}
	for name, vs := range p.o.Header {
		req.Header[http.CanonicalHeaderKey(name)] = append([]string(nil), vs...)
	}
	if req.Header.Get(headerContentType) == "" {
		req.Header.Set(headerContentType, contentTypeJSON)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", userAgent)
	}
	if key != "" {
		req.Header.Set(HeaderKey, key)
	}
	if tuple != "" {
		req.Header.Set(HeaderTuple, tuple)
	}
	resp, err := client.Do(req)
	if err != nil {
		return Answer{Err: transportError(err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	a := Answer{Status: resp.StatusCode, Header: resp.Header, Body: data}
	if len(data) > maxBody {
		a.Body, a.Truncated = data[:maxBody], true
	}
	if err != nil {
		a.Err = fmt.Errorf("reading the body: %w", transportError(err))
	}
	return a
}

// transportError drops the *url.Error wrapper, which repeats the URL.
func transportError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return errors.New("timed out")
		}
		return ue.Err
	}
	return err
}

// burst sends n identical requests with one fresh key at once, each over a
// connection of its own opened before any request is written, then retries
// the key until it is no longer in flight.
func (p *prober) burst(ctx context.Context, m Mode, n int, body []byte) burst {
	t := freshTuple(CheckInFlight)
	key, tuple := t.Key(), t.Encoded()
	b := newBarrier(n)
	dialer := &net.Dialer{Timeout: p.o.Timeout}
	tr := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			b.arrive(ctx)
			return c, err
		},
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := &tls.Dialer{NetDialer: dialer, Config: &tls.Config{ServerName: p.u.Hostname(), MinVersion: tls.VersionTLS12}}
			c, err := d.DialContext(ctx, network, addr)
			b.arrive(ctx)
			return c, err
		},
		// HTTP/1.1 only and no reuse: n requests, n connections.
		TLSNextProto:      map[string]func(string, *tls.Conn) http.RoundTripper{},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	client := noRedirects(tr)
	out := burst{answers: make([]Answer, n)}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { out.answers[i] = p.send(ctx, client, key, tuple, body) })
	}
	wg.Wait()
	for range settleAttempts {
		out.settle = p.send(ctx, p.client, key, tuple, body)
		if classify(m, out.settle) != KindInFlight {
			break
		}
		wait, _ := dispatch.ParseRetryAfter(out.settle.Header.Get(HeaderRetryAfter), time.Now())
		if !sleep(ctx, min(max(wait, settleWaitMin), settleWaitMax)) {
			break
		}
	}
	return out
}

// barrier holds each of n connections until all n are open (or barrierWait
// passed), so their requests are written together.
type barrier struct {
	mu    sync.Mutex
	left  int
	ready chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{left: n, ready: make(chan struct{})} }

// arrive counts one connection and waits for the others.
func (b *barrier) arrive(ctx context.Context) {
	b.mu.Lock()
	b.left--
	if b.left == 0 {
		close(b.ready)
	}
	b.mu.Unlock()
	t := time.NewTimer(barrierWait)
	defer t.Stop()
	select {
	case <-b.ready:
	case <-t.C:
	case <-ctx.Done():
	}
}

// sleep waits d or until ctx is done; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// variant returns a payload that differs from payload as a JSON value: an
// object gains a member, anything else is wrapped in one.
func variant(payload []byte) []byte {
	mark := fmt.Sprintf("%q:%q", variantField, rand.Text())
	p := bytes.TrimSpace(payload)
	if len(p) > 0 && p[0] == '{' {
		inner := bytes.TrimSpace(p[1:])
		if len(inner) > 0 && inner[0] == '}' {
			return []byte("{" + mark + "}")
		}
		return append([]byte("{"+mark+","), p[1:]...)
	}
	return append(append([]byte("{"+mark+`,"payload":`), p...), '}')
}
