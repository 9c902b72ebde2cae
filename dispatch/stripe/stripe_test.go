package stripe

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
	"github.com/drainer-io/drainer/outbox"
)

const payloadSecret = "s3cr3t-payload-value"

func dispatchOK(t *testing.T, a *Adapter, m *dispatch.Message) dispatch.Result {
	t.Helper()
	r := a.Dispatch(t.Context(), m)
	assertRedacted(t, r, m.Key)
	return r
}

// assertRedacted fails if r.Err reveals the API key, the idempotency key or
// the payload marker.
func assertRedacted(t *testing.T, r dispatch.Result, key string) {
	t.Helper()
	if r.Err == nil {
		return
	}
	msg := r.Err.Error()
	for _, s := range []string{testAPIKey, key, payloadSecret} {
		if strings.Contains(msg, s) {
			t.Errorf("Result.Err reveals %q: %s", s, msg)
		}
	}
}

func TestDispatchRequest(t *testing.T) {
	up := newFakeStripe(t)
	a := newTestAdapter(t, up.srv.URL+"/proxy/", nil)
	m := dispatchtest.NewMessage("create_customer",
		`{"email":"a@example.com","metadata":{"order":"A-17"},"preferred_locales":["fr","en"],"balance":-150,"tax_exempt":null}`)
	r := dispatchOK(t, a, m)
	if r.Outcome != dispatch.Success || r.Status != 200 || r.Reason != dispatch.ReasonHTTP2xx {
		t.Fatalf("result %+v", r)
	}
	var obj struct{ ID, Object string }
	if err := json.Unmarshal(r.Response, &obj); err != nil || obj.ID == "" || obj.Object != "customer" {
		t.Errorf("response %s", r.Response)
	}
	reqs := up.seen()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	got := reqs[0]
	if got.method != http.MethodPost || got.path != "/proxy/v1/customers" {
		t.Errorf("request %s %s, want POST /proxy/v1/customers", got.method, got.path)
	}
	want := map[string]string{
		"Authorization":             "Bearer " + testAPIKey,
		"Idempotency-Key":           m.Key,
		"Stripe-Version":            "2024-06-20",
		"Content-Type":              "application/x-www-form-urlencoded",
		"X-Agent-Idempotency-Tuple": m.Tuple.Encoded(),
	}
	for name, v := range want {
		if g := got.header.Get(name); g != v {
			t.Errorf("header %s = %q, want %q", name, g, v)
		}
	}
	if ua := got.header.Get("User-Agent"); !strings.HasPrefix(ua, "drainer/") {
		t.Errorf("User-Agent %q", ua)
	}
	const wantBody = "balance=-150&email=a%40example.com&metadata%5Border%5D=A-17&preferred_locales%5B0%5D=fr&preferred_locales%5B1%5D=en"
	if got.body != wantBody {
		t.Errorf("body\n got %s\nwant %s", got.body, wantBody)
	}
}

func TestDispatchNoVersionHeader(t *testing.T) {
	up := newFakeStripe(t)
	a := newTestAdapter(t, up.srv.URL, func(c *Config) { c.StripeVersion = "" })
	dispatchOK(t, a, dispatchtest.NewMessage("create_customer", `{}`))
	if h := up.seen()[0].header; h.Get("Stripe-Version") != "" {
		t.Errorf("Stripe-Version sent without a pin: %q", h.Get("Stripe-Version"))
	}
}

// TestReplayAndMismatch: what stripe-mock cannot show, against fakeStripe.
func TestReplayAndMismatch(t *testing.T) {
	up := newFakeStripe(t)
	a := newTestAdapter(t, up.srv.URL, nil)
	m := dispatchtest.NewMessage("create_charge", `{"amount":500,"currency":"eur","description":"`+payloadSecret+`"}`)
	first := dispatchOK(t, a, m)
	if first.Outcome != dispatch.Success {
		t.Fatalf("first: %+v", first)
	}
	again := *m
	again.Attempt = 2
	replay := dispatchOK(t, a, &again)
	if replay.Outcome != dispatch.Replay || replay.Reason != dispatch.ReasonReplay || string(replay.Response) != string(first.Response) {
		t.Errorf("replay: %+v, want Replay with the first response %s", replay, first.Response)
	}
	other := again
	other.Payload = json.RawMessage(`{"amount":900,"currency":"eur","description":"` + payloadSecret + `"}`)
	mismatch := dispatchOK(t, a, &other)
	if mismatch.Outcome != dispatch.Terminal || mismatch.Reason != dispatch.ReasonPayloadMismatch {
		t.Errorf("mismatch: %+v, want Terminal payload_mismatch", mismatch)
	}
	var apiErr *APIError
	if !errors.As(mismatch.Err, &apiErr) || apiErr.Type != TypeIdempotencyError || !strings.Contains(apiErr.Message, "key other than '<redacted>'") {
		t.Errorf("mismatch error %v, want an idempotency_error with the key redacted", mismatch.Err)
	}
	if n := up.Effects(t, m.Key); n != 1 {
		t.Errorf("%d effects, want 1", n)
	}
}

// TestDispatchClasses runs the classification against Stripe-shaped answers.
func TestDispatchClasses(t *testing.T) {
	jsonCT := http.Header{"Content-Type": {"application/json"}}
	tests := []struct {
		name       string
		answer     answer
		outcome    dispatch.Outcome
		reason     string
		retryAfter time.Duration
		errHas     []string
	}{
		{"card declined", stripeError(402, "card_error", "card_declined", "Your card was declined."),
			dispatch.Terminal, ReasonCardError, 0,
			[]string{"stripe http 402: card_error (code=card_declined): Your card was declined. [req_test123]"}},
		{"card error, should retry", stripeError(402, "card_error", "processing_error", "try again", "Stripe-Should-Retry", "true"),
			dispatch.Retry, ReasonShouldRetry, 0, []string{"card_error (code=processing_error)"}},
		{"invalid request", stripeError(400, "invalid_request_error", "parameter_missing", "Missing required param: amount."),
			dispatch.Terminal, ReasonInvalidRequestError, 0, []string{"Missing required param: amount."}},
		{"resource missing", stripeError(404, "invalid_request_error", "resource_missing", "No such customer: 'cus_x'"),
			dispatch.Terminal, ReasonInvalidRequestError, 0, []string{"No such customer"}},
		{"idempotency mismatch", stripeError(400, "idempotency_error", "", "Keys for idempotent requests can only be used with the same parameters"),
			dispatch.Terminal, dispatch.ReasonPayloadMismatch, 0, []string{"idempotency_error"}},
		{"key in use", stripeError(409, "idempotency_error", "", "There is currently another in-progress request using this Idempotent Key"),
			dispatch.Retry, dispatch.ReasonInFlightUpstream, 0, []string{"another in-progress request"}},
		{"rate limited", stripeError(429, "rate_limit_error", "rate_limit", "Too many requests", "Retry-After", "3"),
			dispatch.Retry, dispatch.ReasonHTTP429, 3 * time.Second, []string{"rate_limit_error"}},
		{"lock timeout", stripeError(429, "invalid_request_error", "lock_timeout", "This object cannot be accessed right now"),
			dispatch.Retry, dispatch.ReasonHTTP429, 0, []string{"lock_timeout"}},
		{"api error", stripeError(500, "api_error", "", "Something went wrong"),
			dispatch.Retry, ReasonAPIError, 0, []string{"stripe http 500: api_error: Something went wrong"}},
		{"api error on a 4xx", stripeError(400, "api_error", "", "odd"), dispatch.Retry, ReasonAPIError, 0, nil},
		{"rate limit error type", stripeError(400, "rate_limit_error", "", "slow down"), dispatch.Retry, ReasonRateLimitError, 0, nil},
		{"should not retry beats 5xx", stripeError(500, "api_error", "", "final", "Stripe-Should-Retry", "false"),
			dispatch.Terminal, ReasonShouldNotRetry, 0, nil},
		{"should retry beats 400", stripeError(400, "invalid_request_error", "", "x", "Stripe-Should-Retry", "TRUE", "Retry-After", "2"),
			dispatch.Retry, ReasonShouldRetry, 2 * time.Second, nil},
		{"auth stands", stripeError(401, "invalid_request_error", "", "Invalid API Key provided: "+testAPIKey, "Stripe-Should-Retry", "true"),
			dispatch.Auth, dispatch.ReasonAuth, 0, []string{"Invalid API Key provided: <redacted>"}},
		{"permission", stripeError(403, "invalid_request_error", "", "The provided key does not have access"), dispatch.Auth, dispatch.ReasonAuth, 0, nil},
		{"unknown type, 4xx", stripeError(418, "teapot_error", "", "short and stout"), dispatch.Terminal, dispatch.ReasonHTTP4xx, 0, []string{"teapot_error"}},
		{"proxy 502", answer{502, http.Header{"Content-Type": {"text/html"}}, "<html>bad gateway</html>"},
			dispatch.Retry, dispatch.ReasonHTTP5xx, 0, []string{`stripe: http 502 Bad Gateway: body "<html>bad gateway</html>"`}},
		{"redirect", answer{302, http.Header{"Location": {"https://elsewhere/"}}, ""}, dispatch.Terminal, dispatch.ReasonRedirect, 0, []string{"http 302"}},
		{"replayed 200", answer{200, http.Header{"Content-Type": {"application/json"}, "Idempotent-Replayed": {"true"}}, `{"id":"ch_1"}`},
			dispatch.Replay, dispatch.ReasonReplay, 0, nil},
		{"created", answer{200, jsonCT, `{"id":"ch_1"}`}, dispatch.Success, dispatch.ReasonHTTP2xx, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := newFakeStripe(t)
			up.script = func(*http.Request, []byte) *answer { return &tt.answer }
			a := newTestAdapter(t, up.srv.URL, nil)
			m := dispatchtest.NewMessage("create_payment_intent", `{"amount":1,"description":"`+payloadSecret+`"}`)
			r := dispatchOK(t, a, m)
			if r.Outcome != tt.outcome || r.Reason != tt.reason || r.RetryAfter != tt.retryAfter || r.Status != tt.answer.status {
				t.Errorf("got %s/%s retry_after=%v status=%d, want %s/%s retry_after=%v status=%d (err %v)",
					r.Outcome, r.Reason, r.RetryAfter, r.Status, tt.outcome, tt.reason, tt.retryAfter, tt.answer.status, r.Err)
			}
			if r.Succeeded() {
				if r.Err != nil || !json.Valid(r.Response) {
					t.Errorf("success with err %v, response %q", r.Err, r.Response)
				}
				return
			}
			if r.Err == nil {
				t.Fatal("nil Err on a failure")
			}
			for _, w := range tt.errHas {
				if !strings.Contains(r.Err.Error(), w) {
					t.Errorf("Err %q, want it to contain %q", r.Err, w)
				}
			}
		})
	}
}

func TestUnknownTool(t *testing.T) {
	up := newFakeStripe(t)
	a := newTestAdapter(t, up.srv.URL, nil)
	r := dispatchOK(t, a, dispatchtest.NewMessage("delete_everything", `{}`))
	if r.Outcome != dispatch.Terminal || !r.NotSent || r.Reason != dispatch.ReasonUnsendable {
		t.Fatalf("result %+v", r)
	}
	for _, w := range []string{`tool "delete_everything" has no Stripe endpoint`, "create_customer", "stripe.refunds.create"} {
		if !strings.Contains(r.Err.Error(), w) {
			t.Errorf("Err %q, want %q", r.Err, w)
		}
	}
	if n := len(up.seen()); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

func TestInvalidPayload(t *testing.T) {
	up := newFakeStripe(t)
	a := newTestAdapter(t, up.srv.URL, nil)
	for _, p := range []string{`["` + payloadSecret + `"]`, `{"a[b]":"` + payloadSecret + `"}`} {
		r := dispatchOK(t, a, dispatchtest.NewMessage("create_customer", p))
		if r.Outcome != dispatch.Terminal || !r.NotSent || r.Reason != dispatch.ReasonUnsendable || !errors.Is(r.Err, ErrInvalidPayload) {
			t.Errorf("payload %s: %+v", p, r)
		}
	}
	if n := len(up.seen()); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

func TestConfigTools(t *testing.T) {
	up := newFakeStripe(t)
	a := newTestAdapter(t, up.srv.URL, func(c *Config) {
		c.Tools = map[string]string{"open_account": "/v1/customers", "create_customer": "/v1/accounts"}
	})
	dispatchOK(t, a, dispatchtest.NewMessage("open_account", `{}`))
	dispatchOK(t, a, dispatchtest.NewMessage("create_customer", `{}`))
	dispatchOK(t, a, dispatchtest.NewMessage("refund_card", `{}`))
	var paths []string
	for _, r := range up.seen() {
		paths = append(paths, r.path)
	}
	if got := strings.Join(paths, " "); got != "/v1/customers /v1/accounts /v1/refunds" {
		t.Errorf("paths %s", got)
	}
	if _, ok := Endpoint("open_account"); ok {
		t.Error("Config.Tools leaked into the built-in table")
	}
}

func TestTransportErrors(t *testing.T) {
	// Nothing listens: the request is never written.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	a := newTestAdapter(t, "http://"+addr, nil)
	r := dispatchOK(t, a, dispatchtest.NewMessage("create_customer", `{}`))
	if r.Outcome != dispatch.Retry || !r.NotSent || r.Reason != dispatch.ReasonConnect {
		t.Errorf("refused: %+v", r)
	}

	// A 200 whose body is cut off: the object exists, its answer is lost.
	cut := newFakeStripe(t)
	cut.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(200)
		io.WriteString(w, `{"id":`)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	a = newTestAdapter(t, cut.srv.URL, nil)
	r = dispatchOK(t, a, dispatchtest.NewMessage("create_customer", `{}`))
	if r.Outcome != dispatch.Ambiguous || r.Status != 200 || !strings.Contains(r.Err.Error(), "answer cut off") {
		t.Errorf("cut off: %+v", r)
	}

	// The adapter's own timeout bounds an attempt.
	hang := newFakeStripe(t)
	hang.Inject(dispatchtest.FaultHang, 1)
	a = newTestAdapter(t, hang.srv.URL, func(c *Config) { c.Timeout = 200 * time.Millisecond })
	start := time.Now()
	r = a.Dispatch(context.Background(), dispatchtest.NewMessage("create_customer", `{}`))
	if r.Outcome != dispatch.Ambiguous || r.Reason != dispatch.ReasonTimeout || time.Since(start) > 5*time.Second {
		t.Errorf("timeout: %+v after %v", r, time.Since(start))
	}
}

// TestCompensationRefund: a compensation row to the refunds endpoint
// carries the saga's object, not Stripe parameters: the refund is built
// from the forward call's answer (its charge or payment intent, in full),
// the forward key in its metadata. An answer that is neither cannot be
// refunded: the row fails unsent, naming why.
func TestCompensationRefund(t *testing.T) {
	up := newFakeStripe(t)
	a := newTestAdapter(t, up.srv.URL, nil)
	for _, c := range []struct{ object, id, want string }{
		{"charge", "ch_3Mx", "charge=ch_3Mx&metadata%5Bdrainer_forward_key%5D=idem_fwd"},
		{"payment_intent", "pi_3My", "metadata%5Bdrainer_forward_key%5D=idem_fwd&payment_intent=pi_3My"},
	} {
		m := dispatchtest.NewMessage("create_refund",
			`{"forward_key":"idem_fwd","forward_payload":{"amount":2000,"currency":"usd"},"forward_response":{"id":"`+c.id+`","object":"`+c.object+`","amount":2000}}`)
		m.Kind = outbox.KindCompensation
		if r := dispatchOK(t, a, m); !r.Succeeded() {
			t.Fatalf("refund of a %s: %+v", c.object, r)
		}
		reqs := up.seen()
		if got := reqs[len(reqs)-1]; got.path != "/v1/refunds" || got.body != c.want {
			t.Errorf("refund of a %s: %s %s, want /v1/refunds %s", c.object, got.path, got.body, c.want)
		}
	}
	m := dispatchtest.NewMessage("create_refund", `{"forward_key":"idem_fwd","forward_payload":{},"forward_response":{"id":"cus_1","object":"customer"}}`)
	m.Kind = outbox.KindCompensation
	sent := len(up.seen())
	r := dispatchOK(t, a, m)
	if r.Outcome != dispatch.Terminal || !r.NotSent || r.Reason != dispatch.ReasonUnsendable || !strings.Contains(r.Err.Error(), "a refund undoes a charge or a payment intent") {
		t.Errorf("refund of a customer: %+v", r)
	}
	if n := len(up.seen()); n != sent {
		t.Errorf("an unrefundable answer was sent: %d requests after, %d before", n, sent)
	}
	// A forward refund (an agent's own call) is sent as its payload says.
	f := dispatchtest.NewMessage("create_refund", `{"charge":"ch_9"}`)
	if r := dispatchOK(t, a, f); !r.Succeeded() || up.seen()[len(up.seen())-1].body != "charge=ch_9" {
		t.Errorf("a forward refund: %+v, body %s", r, up.seen()[len(up.seen())-1].body)
	}
}
