package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
)

// Adapter delivers rows by HTTP POST. It is safe for concurrent use.
type Adapter struct {
	cfg Config
	// urlParts is cfg.URL split around {tool_name}.
	urlParts []string
	// routes are cfg.Routes with their paths parsed and queries encoded.
	routes map[string]compiledRoute
	// header holds the configured headers and the User-Agent; each request
	// gets a clone completed with the per-row headers.
	header http.Header
	client *http.Client
}

var _ dispatch.Adapter = (*Adapter)(nil)

// New validates cfg (after WithDefaults) and builds an adapter with its own
// connection pool. Errors are those of Config.Validate.
func New(cfg Config) (*Adapter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	header := http.Header{}
	header.Set("User-Agent", cfg.UserAgent)
	for name, value := range cfg.Headers {
		header.Set(name, value)
	}
	routes := make(map[string]compiledRoute, len(cfg.Routes))
	for tool, r := range cfg.Routes {
		routes[tool] = compile(r)
	}
	return &Adapter{
		cfg:      cfg,
		routes:   routes,
		urlParts: strings.Split(cfg.URL, toolNameVar),
		header:   header,
		client:   dispatch.NewHTTPClient(cfg.Timeout, cfg.Transport),
	}, nil
}

// Close closes the adapter's idle connections. Dispatch may still be called
// afterwards; it opens new ones.
func (a *Adapter) Close() error {
	a.client.CloseIdleConnections()
	return nil
}

// Dispatch POSTs m.Payload to the configured URL and classifies the answer.
// One attempt is bounded by Config.Timeout and by ctx.
//
// A 2xx whose body cannot be read to the end (connection lost, timeout,
// cancellation) is Ambiguous, not Success: the effect happened but its answer
// was lost; on a key-idempotent route the retry is answered as a replay with
// the full response, and a non_idempotent route parks the row for a human.
// Any other answer is classified by its status; its body is best effort.
func (a *Adapter) Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	var sent dispatch.SendTracker
	req, err := a.newRequest(sent.Trace(ctx), m)
	if err != nil {
		// Nothing left this process: the payload cannot build the route's
		// request (a path field, a body key placement on a payload that is
		// no JSON object). The row fails without consuming an attempt.
		return unsendable(err)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return dispatch.ClassifyTransportError(ctx, err, sent.MaybeSent())
	}
	defer resp.Body.Close()
	// Never more than limit+1 bytes: closing the rest drops the connection,
	// which is cheaper than reading a huge answer.
	body, _, readErr := dispatch.ReadBody(resp.Body, a.cfg.ResponseLimit)
	return a.result(ctx, resp, body, readErr)
}

func (a *Adapter) newRequest(ctx context.Context, m *dispatch.Message) (*http.Request, error) {
	route := a.routes[m.Tuple.ToolName]
	target, query, _ := strings.Cut(strings.Join(a.urlParts, url.PathEscape(m.Tuple.ToolName)), "?")
	if route.path != nil {
		p, err := route.path.Expand(m.Tuple.ToolName, m.Payload)
		if err != nil {
			return nil, err
		}
		target = strings.TrimSuffix(target, "/") + p
	}
	query = joinQuery(query, route.query)
	place := a.cfg.placementFor(m.Tuple.ToolName)
	body, err := route.body(m.Payload)
	if err != nil {
		return nil, err
	}
	switch place.Location {
	case LocationQuery:
		query = joinQuery(query, url.QueryEscape(place.Name)+"="+url.QueryEscape(m.Key))
	case LocationBody:
		if body, err = withKeyField(body, place.Name, m.Key); err != nil {
			return nil, err
		}
	}
	if query != "" {
		target += "?" + query
	}
	req, err := dispatch.NewRequest(ctx, route.method(), target, body)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // url.Error quotes the URL and its query
		}
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header = a.header.Clone()
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if place.Location == LocationHeader {
		req.Header.Set(place.Name, m.Key)
	}
	req.Header.Set("X-Agent-Idempotency-Tuple", m.Tuple.Encoded())
	if wire.ValidTraceparent(m.Traceparent) {
		req.Header.Set("Traceparent", m.Traceparent)
	}
	return req, nil
}

func (a *Adapter) result(ctx context.Context, resp *http.Response, body []byte, readErr error) dispatch.Result {
	outcome, reason := dispatch.ClassifyHTTP(resp.StatusCode, resp.Header)
	r := dispatch.Result{Outcome: outcome, Reason: reason, Status: resp.StatusCode}
	contentType := resp.Header.Get("Content-Type")
	switch outcome {
	case dispatch.Success, dispatch.Replay:
		if readErr != nil {
			lost := dispatch.ClassifyTransportError(ctx, readErr, true)
			lost.Status = resp.StatusCode
			lost.Err = fmt.Errorf("http %d answer cut off: %w", resp.StatusCode, lost.Err)
			return lost
		}
		r.Response = dispatch.ResponseJSON(contentType, body, a.cfg.ResponseLimit)
		return r
	case dispatch.Retry:
		r.RetryAfter = dispatch.RetryAfter(resp.Header)
	}
	r.Problem = dispatch.ParseProblem(contentType, body)
	r.Err = dispatch.NewHTTPError(resp.StatusCode, body, r.Problem)
	return r
}
