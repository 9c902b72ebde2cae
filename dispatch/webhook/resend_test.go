package webhook

import (
	"net/http"
	"testing"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
)

// TestNoSilentResend: a provider that applies the effect and then drops a
// reused keep-alive connection must see the request once, and the attempt
// must come back ambiguous: the engine, not the transport, decides whether
// to send it again.
func TestNoSilentResend(t *testing.T) {
	srv := dispatchtest.NewDropOnReuse(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	})
	a, err := New(Config{URL: srv.URL + "/{tool_name}"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	first := dispatchtest.NewMessage("charge_card", `{"amount":1}`)
	if r := a.Dispatch(t.Context(), first); r.Outcome != dispatch.Success {
		t.Fatalf("first attempt: %v %v", r.Outcome, r.Err)
	}
	second := dispatchtest.NewMessage("charge_card", `{"amount":2}`)
	r := a.Dispatch(t.Context(), second)
	if got := srv.Effects(second.Key); got != 1 {
		t.Fatalf("the provider saw the second request %d times; want 1 (the transport re-sent it)", got)
	}
	if r.Outcome != dispatch.Ambiguous || r.NotSent {
		t.Fatalf("second attempt: outcome %v (not sent %v, %v); want ambiguous", r.Outcome, r.NotSent, r.Err)
	}
}
