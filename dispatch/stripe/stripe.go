package stripe

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
)

// Adapter creates Stripe objects, one POST per attempt. It is safe for
// concurrent use.
type Adapter struct {
	cfg Config
	// base is cfg.BaseURL without a trailing slash.
	base string
	// endpoints is the built-in table with cfg.Tools applied.
	endpoints map[string]string
	// supported lists the tool names, sorted, for the unknown-tool error.
	supported string
	// header holds the headers every request carries; each request gets a
	// clone completed with the per-row ones.
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
	eps := maps.Clone(endpoints)
	maps.Copy(eps, cfg.Tools)
	header := http.Header{}
	header.Set("Authorization", "Bearer "+cfg.APIKey)
	header.Set("Content-Type", "application/x-www-form-urlencoded")
	header.Set("Accept", "application/json")
	header.Set("User-Agent", cfg.UserAgent)
	if cfg.StripeVersion != "" {
		header.Set("Stripe-Version", cfg.StripeVersion)
	}
	return &Adapter{
		cfg:       cfg,
		base:      strings.TrimRight(cfg.BaseURL, "/"),
		endpoints: eps,
		supported: strings.Join(slices.Sorted(maps.Keys(eps)), ", "),
		header:    header,
		client:    dispatch.NewHTTPClient(cfg.Timeout, cfg.Transport),
	}, nil
}

// Close closes the adapter's idle connections. Dispatch may still be called
// afterwards; it opens new ones.
func (a *Adapter) Close() error {
	a.client.CloseIdleConnections()
	return nil
}

// Dispatch POSTs the payload, form-encoded, to the endpoint of the row's
// tool name, with the row's key as Idempotency-Key, and classifies the
// answer. One attempt is bounded by Config.Timeout and by ctx.
//
// A tool name without an endpoint, or a payload that is not a JSON object of
// parameters, is Terminal and nothing is sent (dispatch.ReasonUnsendable:
// the row fails without consuming an attempt). A 2xx whose body cannot be
// read to the end is Ambiguous: the object exists but its answer was lost;
// the retry is answered from Stripe's idempotency cache.
func (a *Adapter) Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result {
	path, ok := a.endpoints[m.Tuple.ToolName]
	if !ok {
		return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: dispatch.ReasonUnsendable,
			Err: fmt.Errorf("stripe: tool %q has no Stripe endpoint; supported tools: %s", m.Tuple.ToolName, a.supported)}
	}
	params := m.Payload
	if m.Kind == outbox.KindCompensation && path == refundsPath {
		p, err := refundOf(m.Payload)
		if err != nil {
			return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: dispatch.ReasonUnsendable,
				Err: fmt.Errorf("stripe: %w", err)}
		}
		params = p
	}
	form, err := FormEncode(params)
	if err != nil {
		return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: dispatch.ReasonUnsendable,
			Err: fmt.Errorf("stripe: %w", err)}
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	var sent dispatch.SendTracker
	req, err := dispatch.NewRequest(sent.Trace(ctx), http.MethodPost, a.base+path, []byte(form))
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: dispatch.ReasonUnsendable,
			Err: fmt.Errorf("stripe: build request: %w", err)}
	}
	req.Header = a.header.Clone()
	req.Header.Set("Idempotency-Key", m.Key)
	req.Header.Set("X-Agent-Idempotency-Tuple", m.Tuple.Encoded())
	resp, err := a.client.Do(req)
	if err != nil {
		return dispatch.ClassifyTransportError(ctx, err, sent.MaybeSent())
	}
	defer resp.Body.Close()
	body, _, readErr := dispatch.ReadBody(resp.Body, a.cfg.ResponseLimit)
	return a.result(ctx, m, resp, body, readErr)
}

func (a *Adapter) result(ctx context.Context, m *dispatch.Message, resp *http.Response, body []byte, readErr error) dispatch.Result {
	apiErr := parseAPIError(resp.StatusCode, resp.Header, body, m.Key, a.cfg.APIKey)
	outcome, reason := classify(resp.StatusCode, resp.Header, apiErr)
	r := dispatch.Result{Outcome: outcome, Reason: reason, Status: resp.StatusCode}
	switch outcome {
	case dispatch.Success, dispatch.Replay:
		if readErr != nil {
			lost := dispatch.ClassifyTransportError(ctx, readErr, true)
			lost.Status = resp.StatusCode
			lost.Err = fmt.Errorf("stripe http %d answer cut off: %w", resp.StatusCode, lost.Err)
			return lost
		}
		r.Response = dispatch.ResponseJSON(resp.Header.Get("Content-Type"), body, a.cfg.ResponseLimit)
		return r
	case dispatch.Retry:
		r.RetryAfter = dispatch.RetryAfter(resp.Header)
	}
	if apiErr != nil {
		r.Err = apiErr
		return r
	}
	// Not Stripe's error shape (a proxy, a load balancer): the generic error,
	// with the keys scrubbed from the body excerpt.
	r.Problem = dispatch.ParseProblem(resp.Header.Get("Content-Type"), body)
	httpErr := dispatch.NewHTTPError(resp.StatusCode, body, r.Problem)
	httpErr.Excerpt = clean(httpErr.Excerpt, len(httpErr.Excerpt)+len("<redacted>"), []string{m.Key, a.cfg.APIKey})
	r.Err = fmt.Errorf("stripe: %w", httpErr)
	return r
}
