package stripe

import (
	"net/http"
	"testing"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
)

// TestNoSilentResend: Stripe requests carry an Idempotency-Key, which makes
// Go's transport consider them replayable; a connection dropped after the
// effect must still reach the engine as one ambiguous attempt.
func TestNoSilentResend(t *testing.T) {
	srv := dispatchtest.NewDropOnReuse(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"ch_1","object":"charge"}`))
	})
	a, err := New(Config{APIKey: testAPIKey, BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	first := dispatchtest.NewMessage("charge_card", `{"amount":1,"currency":"eur"}`)
	if r := a.Dispatch(t.Context(), first); r.Outcome != dispatch.Success {
		t.Fatalf("first attempt: %v %v", r.Outcome, r.Err)
	}
	second := dispatchtest.NewMessage("charge_card", `{"amount":2,"currency":"eur"}`)
	r := a.Dispatch(t.Context(), second)
	if got := srv.Effects(second.Key); got != 1 {
		t.Fatalf("the provider saw the second request %d times; want 1 (the transport re-sent it)", got)
	}
	if r.Outcome != dispatch.Ambiguous || r.NotSent {
		t.Fatalf("second attempt: outcome %v (not sent %v, %v); want ambiguous", r.Outcome, r.NotSent, r.Err)
	}
}
