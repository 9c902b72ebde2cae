package drainer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/internal/maintenance"
)

// Detector asks a provider whether an ambiguous attempt of a non_idempotent
// route had its effect: GET its URL with the row's key.
//
// A 2xx proves the effect. A 404 or 410 is only believed once the probe has
// proven itself: it must have answered 2xx for a key of its route known to
// have succeeded, at most trustFor ago (calibrate). A probe aimed at the
// wrong place answers 404 for everything, and believing it would send the
// request again. And since a provider may be slow to show an effect, an
// absence counts only when a second probe, settle later, confirms it. Until
// then the row parks as outcome_unknown, for a human.
type Detector struct {
	url     string
	headers map[string]string
	timeout time.Duration
	settle  time.Duration
	client  *http.Client

	mu      sync.Mutex
	lookup  func(context.Context) (*dispatch.Message, error) // a succeeded key of the route
	trusted time.Time                                        // last successful calibration
	tried   time.Time                                        // last calibration
	reason  string                                           // why it is not trusted
	witness *dispatch.Message                                // the last row of the route this replica saw succeed
}

// sawSuccess records a row of the route that succeeded: a key the probe
// must find, to be trusted.
func (d *Detector) sawSuccess(key string, tu idemkey.Tuple) {
	d.mu.Lock()
	d.witness = &dispatch.Message{Key: key, Tuple: tu}
	if d.trusted.IsZero() {
		d.tried = time.Time{} // a new witness: the next question may calibrate at once
	}
	d.mu.Unlock()
}

// Detector tuning.
const (
	// trustFor is how long a successful calibration is believed.
	trustFor = 15 * time.Minute
	// calibrateEvery is how often the engine calibrates its probes.
	calibrateEvery = 5 * time.Minute
	// recalibrateAfter spaces the calibrations an untrusted probe runs on
	// its own when asked about an absence.
	recalibrateAfter = time.Second
)

// DetectConfig configures a route's probe.
type DetectConfig struct {
	// URL is GET with {key} and {tool_name} substituted, path-escaped.
	URL string
	// Headers are sent with every probe (already expanded secrets).
	Headers map[string]string
	// Timeout bounds one probe (required).
	Timeout time.Duration
	// Settle is waited before the first probe and between the two probes
	// that must both find no effect.
	Settle time.Duration
}

// NewDetector builds the probe of a route.
func NewDetector(c DetectConfig) *Detector {
	return &Detector{
		url: c.URL, headers: c.Headers, timeout: c.Timeout, settle: c.Settle,
		client: dispatch.NewHTTPClient(c.Timeout, nil),
		reason: "it has not yet answered 2xx for a succeeded key of its route",
	}
}

// probeVerdict is what a probe learned.
type probeVerdict int

const (
	probeUnknown  probeVerdict = iota // the outcome stays unknown
	probeHappened                     // the effect exists: the row succeeded
	probeAbsent                       // no effect: retrying with the same key is safe
)

// Probe asks whether the effect of m exists: see the type's rules.
func (d *Detector) Probe(ctx context.Context, m *dispatch.Message) (probeVerdict, dispatch.Result) {
	if !sleep(ctx, d.settle) {
		return probeUnknown, dispatch.Result{Err: errors.New("detect probe: no time left to probe")}
	}
	verdict, res := d.probeOnce(ctx, m)
	if verdict != probeAbsent {
		return verdict, res
	}
	if why := d.distrust(ctx); why != "" {
		return probeUnknown, dispatch.Result{Status: res.Status,
			Err: fmt.Errorf("detect probe answered http %d but is not trusted: %s", res.Status, why)}
	}
	// Confirm the absence once the provider had time to show the effect.
	if !sleep(ctx, cmp.Or(d.settle, 500*time.Millisecond)) {
		return probeUnknown, dispatch.Result{Err: errors.New("detect probe: no time left to confirm the absence")}
	}
	return d.probeOnce(ctx, m)
}

// probeOnce sends one probe.
func (d *Detector) probeOnce(ctx context.Context, m *dispatch.Message) (probeVerdict, dispatch.Result) {
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

// distrust returns why the probe's 404s are not believed, "" if they are.
// An untrusted probe calibrates itself at once (at most every
// recalibrateAfter), so a route whose first rows just succeeded need not
// wait for the periodic calibration.
func (d *Detector) distrust(ctx context.Context) string {
	d.mu.Lock()
	trusted := !d.trusted.IsZero() && time.Since(d.trusted) < trustFor
	stale := time.Since(d.tried) >= recalibrateAfter
	d.mu.Unlock()
	if trusted {
		return ""
	}
	if stale {
		d.calibrate(ctx)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.trusted.IsZero() && time.Since(d.trusted) < trustFor {
		return ""
	}
	return d.reason
}

// calibrate probes a key of the route known to have succeeded: a 2xx makes
// the probe trusted for trustFor; anything else makes it untrusted, with the
// reason. It reports whether the probe is trusted, and why not.
func (d *Detector) calibrate(ctx context.Context) (bool, string) {
	d.mu.Lock()
	d.tried = time.Now()
	lookup, known := d.lookup, d.witness
	d.mu.Unlock()
	var err error
	if known == nil && lookup != nil {
		known, err = lookup(ctx)
	}
	var ok bool
	var reason string
	switch {
	case err != nil:
		reason = fmt.Sprintf("no succeeded key of its route could be read to check it: %v", err)
	case known == nil:
		reason = "its route has no succeeded row to check it against yet"
	default:
		verdict, res := d.probeOnce(ctx, known)
		switch {
		case verdict == probeHappened:
			ok = true
		case res.Status > 0:
			reason = fmt.Sprintf("it answered http %d for %s, a key of its route that succeeded (a wrong URL, or a provider slow to show effects)", res.Status, known.Key)
		default:
			reason = fmt.Sprintf("it failed for %s, a key of its route that succeeded: %v", known.Key, res.Err)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if ok {
		d.trusted, d.reason = time.Now(), ""
		return true, ""
	}
	d.trusted, d.reason = time.Time{}, reason
	return false, reason
}

// attachDetectors lets the probes of rt find succeeded keys of their route.
func (e *Engine) attachDetectors(rt *Routing) {
	for _, r := range rt.Routes {
		if r.Detect == nil {
			continue
		}
		tool := r.Tool
		r.Detect.mu.Lock()
		r.Detect.lookup = func(ctx context.Context) (*dispatch.Message, error) {
			w, err := e.st.LastSucceeded(ctx, e.pool, tool)
			if w == nil || err != nil {
				return nil, err
			}
			return &dispatch.Message{Key: w.Key, Tuple: idemkey.Tuple{AgentRunID: w.AgentRunID, StepID: w.StepID,
				ToolName: w.ToolName, BusinessScope: w.BusinessScope}}, nil
		}
		r.Detect.mu.Unlock()
	}
}

// calibrator calibrates the detect probes of the routing in force: at
// start, after a reload, and every calibrateEvery.
func (e *Engine) calibrator() *maintenance.Loop {
	return maintenance.Periodic("probe calibrator", maintenance.Every(calibrateEvery), e.reloaded, func(ctx context.Context) {
		for _, r := range e.routing.Load().Routes {
			if r.Detect == nil {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			ok, why := r.Detect.calibrate(cctx)
			cancel()
			if !ok && ctx.Err() == nil {
				e.log.Warn("detect probe not trusted: ambiguous attempts of its route park as outcome_unknown", "route", r.Tool, "reason", why)
			}
		}
	})
}
