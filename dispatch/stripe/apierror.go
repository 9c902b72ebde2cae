package stripe

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
)

// Reasons set by the adapter besides those of dispatch.ClassifyHTTP and
// dispatch.ClassifyTransportError: a small fixed set, safe as a metric label.
const (
	ReasonShouldRetry         = "stripe_should_retry"     // Stripe-Should-Retry: true
	ReasonShouldNotRetry      = "stripe_should_not_retry" // Stripe-Should-Retry: false
	ReasonCardError           = "stripe_card_error"
	ReasonInvalidRequestError = "stripe_invalid_request_error"
	ReasonAPIError            = "stripe_api_error"
	ReasonRateLimitError      = "stripe_rate_limit_error"
)

// Error types of Stripe's error object that the classification knows.
const (
	TypeAPIError            = "api_error"
	TypeCardError           = "card_error"
	TypeIdempotencyError    = "idempotency_error"
	TypeInvalidRequestError = "invalid_request_error"
	TypeRateLimitError      = "rate_limit_error"
)

// APIError is Stripe's error object from an answer that is not a success,
// cleaned for logs: one line per field, bounded, with the idempotency key and
// the API key replaced by placeholders if Stripe's message quoted them.
type APIError struct {
	Status      int
	Type        string // e.g. card_error
	Code        string // e.g. card_declined
	DeclineCode string // e.g. insufficient_funds
	Param       string // the parameter at fault, e.g. amount
	Message     string
	RequestID   string // Stripe's Request-Id, for support
}

// Error returns e.g. `stripe http 402: card_error (code=card_declined,
// decline_code=insufficient_funds): Your card was declined. [req_123]`.
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString("stripe http " + strconv.Itoa(e.Status))
	if e.Type != "" {
		b.WriteString(": " + e.Type)
	}
	var attrs []string
	for _, kv := range [][2]string{{"code", e.Code}, {"decline_code", e.DeclineCode}, {"param", e.Param}} {
		if kv[1] != "" {
			attrs = append(attrs, kv[0]+"="+kv[1])
		}
	}
	if len(attrs) > 0 {
		b.WriteString(" (" + strings.Join(attrs, ", ") + ")")
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.RequestID != "" {
		b.WriteString(" [" + e.RequestID + "]")
	}
	return b.String()
}

// parseAPIError decodes Stripe's {"error": {...}} body; nil if body is not
// one. Every field goes through clean, with the strings in redact removed.
func parseAPIError(status int, h http.Header, body []byte, redact ...string) *APIError {
	var doc struct {
		Error *struct {
			Type        string `json:"type"`
			Code        string `json:"code"`
			DeclineCode string `json:"decline_code"`
			Param       string `json:"param"`
			Message     string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &doc) != nil || doc.Error == nil {
		return nil
	}
	c := func(s string, limit int) string { return clean(s, limit, redact) }
	return &APIError{
		Status:      status,
		Type:        c(doc.Error.Type, 64),
		Code:        c(doc.Error.Code, 64),
		DeclineCode: c(doc.Error.DeclineCode, 64),
		Param:       c(doc.Error.Param, 128),
		Message:     c(doc.Error.Message, 480),
		RequestID:   c(h.Get("Request-Id"), 64),
	}
}

// classify maps an answer to an Outcome and a reason: dispatch.ClassifyHTTP
// first (2xx, replays and auth stand as it says), then Stripe-Should-Retry,
// then the error type, except that 409 (the key is in use by a request still
// running) and 429 (rate limits, lock timeouts) are always retried, as
// Stripe's own libraries do.
func classify(status int, h http.Header, apiErr *APIError) (dispatch.Outcome, string) {
	outcome, reason := dispatch.ClassifyHTTP(status, h)
	switch outcome {
	case dispatch.Success, dispatch.Replay, dispatch.Auth:
		return outcome, reason
	}
	switch strings.ToLower(strings.TrimSpace(h.Get("Stripe-Should-Retry"))) {
	case "true":
		return dispatch.Retry, ReasonShouldRetry
	case "false":
		return dispatch.Terminal, ReasonShouldNotRetry
	}
	if status == http.StatusConflict || status == http.StatusTooManyRequests || apiErr == nil {
		return outcome, reason
	}
	switch apiErr.Type {
	case TypeCardError:
		return dispatch.Terminal, ReasonCardError
	case TypeIdempotencyError:
		// Outside 409, Stripe's idempotency error means the key was first
		// used with other parameters or another endpoint.
		return dispatch.Terminal, dispatch.ReasonPayloadMismatch
	case TypeInvalidRequestError:
		return dispatch.Terminal, ReasonInvalidRequestError
	case TypeAPIError:
		return dispatch.Retry, ReasonAPIError
	case TypeRateLimitError:
		return dispatch.Retry, ReasonRateLimitError
	}
	return outcome, reason
}

// clean makes provider text safe for a log line: each string of redact is
// replaced by "<redacted>", then wire.OneLine makes it one line of at most
// limit bytes.
func clean(s string, limit int, redact []string) string {
	for _, r := range redact {
		if r != "" {
			s = strings.ReplaceAll(s, r, "<redacted>")
		}
	}
	return wire.OneLine(s, limit)
}
