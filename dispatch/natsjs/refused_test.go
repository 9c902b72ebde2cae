package natsjs

import (
	"testing"

	"github.com/drainer-io/drainer/dispatch"
)

// TestFullStreamRefusalCounts publishes to a stream that holds one message
// and discards new ones: JetStream refuses the second message with an error
// acknowledgement. The refusal is an answer of the provider, so it is
// Refused (the attempt counts and a row refused every time ends at its
// route's max_attempts), not NotSent (which gives the attempt back, and
// kept such a row, or a saga's compensation, pending for ever). It is this
// stream's refusal, not JetStream down: the breaker does not count it
// (Down false), so the adapter's other subjects go on.
func TestFullStreamRefusalCounts(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t, sharedServer(t))
	subject := e.prefix + ".intents"
	e.createStream(t, streamSpec{subjects: []string{subject}, maxMsgs: 1})
	a := newAdapter(t, Config{Servers: []string{e.url}, Subject: subject})
	dispatchOK(t, a, testMessage("charge_card"), dispatch.Success)
	r := a.Dispatch(t.Context(), testMessage("refund_card"))
	assertRedacted(t, r)
	if r.Outcome != dispatch.Retry || r.NotSent || !r.Refused || r.Down || r.Reason != ReasonStreamFull || r.Err == nil {
		t.Fatalf("full stream: %s NotSent=%v Refused=%v Down=%v (reason %q, err %v), want retry, refused, not down, reason %q",
			r.Outcome, r.NotSent, r.Refused, r.Down, r.Reason, r.Err, ReasonStreamFull)
	}
}
