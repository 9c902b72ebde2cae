package drainer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
)

// Detector asks a provider whether an ambiguous attempt of a non_idempotent
// route had its effect: GET its URL with the row's key.
type Detector struct {
	url     string
	headers map[string]string
	timeout time.Duration
	client  *http.Client
}

// NewDetector builds the probe of a route (nil when none is configured).
func NewDetector(d config.Detect) *Detector {
	if !d.Enabled() {
		return nil
	}
	h := make(map[string]string, len(d.Headers))
	for k, v := range d.Headers {
		h[k] = v.Reveal()
	}
	return &Detector{
		url: d.URL, headers: h, timeout: cmp.Or(d.Timeout, config.DefaultDetectTimeout),
		client: dispatch.NewHTTPClient(cmp.Or(d.Timeout, config.DefaultDetectTimeout), nil),
	}
}

// probeVerdict is what a probe learned.
type probeVerdict int

const (
	probeUnknown  probeVerdict = iota // the outcome stays unknown
	probeHappened                     // the effect exists: the row succeeded
	probeAbsent                       // no effect: retrying with the same key is safe
)

// Probe asks whether the effect of m exists.
func (d *Detector) Probe(ctx context.Context, m *dispatch.Message) (probeVerdict, dispatch.Result) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	u := strings.NewReplacer("{key}", url.PathEscape(m.Key), "{tool_name}", url.PathEscape(m.Tuple.ToolName)).Replace(d.url)
	req, err := dispatch.NewRequest(ctx, http.MethodGet, u, nil)
	if err != nil {
		return probeUnknown, dispatch.Result{Err: errors.New("detect probe: bad URL")}
	}
	for k, v := range d.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Idempotency-Key", m.Key)
	req.Header.Set("X-Agent-Idempotency-Tuple", m.Tuple.Encoded())
	resp, err := d.client.Do(req)
	if err != nil {
		return probeUnknown, dispatch.Result{Err: fmt.Errorf("detect probe failed: %w", errors.Unwrap(err))}
	}
	defer resp.Body.Close()
	body, _, _ := dispatch.ReadBody(resp.Body, dispatch.DefaultResponseLimit)
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return probeHappened, dispatch.Result{Outcome: dispatch.Success, Status: resp.StatusCode,
			Response: dispatch.ResponseJSON(resp.Header.Get("Content-Type"), body, dispatch.DefaultResponseLimit)}
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return probeAbsent, dispatch.Result{Status: resp.StatusCode}
	}
	return probeUnknown, dispatch.Result{Status: resp.StatusCode, Err: fmt.Errorf("detect probe answered http %d", resp.StatusCode)}
}
