package drainer

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
)

// TestDecideAttemptsTable walks docs/reference.md §2's attempt rules and §5's classes
// row by row: which outcomes consume an attempt and where each row goes.
func TestDecideAttemptsTable(t *testing.T) {
	t.Parallel()
	keyRoute := &Route{Tool: "t", Class: "key_idempotent", MaxAttempts: 3, Backoff: Backoff{Base: time.Second, Cap: time.Minute, MaxRetryAfter: time.Hour}}
	nonRoute := &Route{Tool: "t", Class: "non_idempotent", MaxAttempts: 3, Backoff: keyRoute.Backoff}
	natRoute := &Route{Tool: "t", Class: "naturally_idempotent", MaxAttempts: 3, Backoff: keyRoute.Backoff}
	env := decideEnv{rand: rand.New(rand.NewPCG(1, 1))}
	boom := errors.New("boom")
	cases := []struct {
		name     string
		route    *Route
		kind     outbox.Kind
		attempt  int // consumed attempts including this one
		res      dispatch.Result
		status   outbox.Status
		giveBack bool
		outcome  outbox.Outcome
		minDelay time.Duration
	}{
		{"2xx success", keyRoute, "forward", 1, dispatch.Result{Outcome: dispatch.Success, Status: 200, Response: []byte(`{"id":1}`)}, outbox.StatusSucceeded, false, "success", 0},
		{"replay is success", keyRoute, "forward", 2, dispatch.Result{Outcome: dispatch.Replay, Status: 200}, outbox.StatusSucceeded, false, "replay", 0},
		{"retryable answer consumes", keyRoute, "forward", 1, dispatch.Result{Outcome: dispatch.Retry, Status: 503, Err: boom}, outbox.StatusPending, false, "retry", 0},
		{"retry-after is a floor", keyRoute, "forward", 1, dispatch.Result{Outcome: dispatch.Retry, Status: 429, RetryAfter: 30 * time.Second, Err: boom}, outbox.StatusPending, false, "retry", 30 * time.Second},
		{"retry on last attempt fails", keyRoute, "forward", 3, dispatch.Result{Outcome: dispatch.Retry, Status: 503, Err: boom}, outbox.StatusFailed, false, "retry", 0},
		{"not sent gives back", keyRoute, "forward", 1, dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Err: boom}, outbox.StatusPending, true, "retry", 0},
		{"not sent on last attempt still gives back", keyRoute, "forward", 3, dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Err: boom}, outbox.StatusPending, true, "retry", 0},
		{"missing destination gives back", keyRoute, "forward", 3, dispatch.Result{Outcome: dispatch.Retry, NotSent: true, AwaitsFix: true, Err: boom}, outbox.StatusPending, true, "retry", 0},
		{"missing destination counts for a compensation", keyRoute, "compensation", 1, dispatch.Result{Outcome: dispatch.Retry, NotSent: true, AwaitsFix: true, Err: boom}, outbox.StatusPending, false, "retry", 0},
		{"missing destination halts a compensation at its last attempt", nonRoute, "compensation", 3, dispatch.Result{Outcome: dispatch.Retry, NotSent: true, AwaitsFix: true, Err: boom}, outbox.StatusCompensationFailed, false, "retry", 0},
		{"auth gives back", keyRoute, "forward", 3, dispatch.Result{Outcome: dispatch.Auth, Status: 401, Err: boom}, outbox.StatusPending, true, "auth", 0},
		{"terminal fails", keyRoute, "forward", 1, dispatch.Result{Outcome: dispatch.Terminal, Status: 422, Err: boom}, outbox.StatusFailed, false, "terminal", 0},
		{"unsendable fails without an attempt", nonRoute, "forward", 1, dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: dispatch.ReasonUnsendable, Err: boom}, outbox.StatusFailed, true, "terminal", 0},
		{"terminal not sent still consumes", keyRoute, "forward", 1, dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: "invalid_request", Err: boom}, outbox.StatusFailed, false, "terminal", 0},
		{"terminal compensation", keyRoute, "compensation", 1, dispatch.Result{Outcome: dispatch.Terminal, Status: 422, Err: boom}, outbox.StatusCompensationFailed, false, "terminal", 0},
		{"exhausted compensation", keyRoute, "compensation", 3, dispatch.Result{Outcome: dispatch.Retry, Status: 503, Err: boom}, outbox.StatusCompensationFailed, false, "retry", 0},
		{"ambiguous key route retries", keyRoute, "forward", 1, dispatch.Result{Outcome: dispatch.Ambiguous, Err: boom}, outbox.StatusPending, false, "ambiguous", 0},
		{"ambiguous natural route retries", natRoute, "forward", 1, dispatch.Result{Outcome: dispatch.Ambiguous, Err: boom}, outbox.StatusPending, false, "ambiguous", 0},
		{"ambiguous non_idempotent parks", nonRoute, "forward", 1, dispatch.Result{Outcome: dispatch.Ambiguous, Err: boom}, outbox.StatusOutcomeUnknown, false, "ambiguous", 0},
		{"5xx on non_idempotent parks", nonRoute, "forward", 1, dispatch.Result{Outcome: dispatch.Retry, Status: 503, Err: boom}, outbox.StatusOutcomeUnknown, false, "ambiguous", 0},
		{"not sent on non_idempotent retries", nonRoute, "forward", 1, dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Err: boom}, outbox.StatusPending, true, "retry", 0},
		{"refused consumes", keyRoute, "forward", 1, dispatch.Result{Outcome: dispatch.Retry, Refused: true, Err: boom}, outbox.StatusPending, false, "retry", 0},
		{"refused on last attempt fails", keyRoute, "forward", 3, dispatch.Result{Outcome: dispatch.Retry, Refused: true, Err: boom}, outbox.StatusFailed, false, "retry", 0},
		{"refused compensation on last attempt fails", keyRoute, "compensation", 3, dispatch.Result{Outcome: dispatch.Retry, Refused: true, Err: boom}, outbox.StatusCompensationFailed, false, "retry", 0},
		{"refused on non_idempotent retries, counted", nonRoute, "forward", 1, dispatch.Result{Outcome: dispatch.Retry, Refused: true, Err: boom}, outbox.StatusPending, false, "retry", 0},
		{"in flight upstream retries", keyRoute, "forward", 2, dispatch.Result{Outcome: dispatch.Retry, Status: 409, Reason: dispatch.ReasonInFlightUpstream, Err: boom}, outbox.StatusPending, false, "retry", 0},
		{"in flight upstream on last attempt parks", keyRoute, "forward", 3, dispatch.Result{Outcome: dispatch.Retry, Status: 409, Reason: dispatch.ReasonInFlightUpstream, Err: boom}, outbox.StatusOutcomeUnknown, false, "ambiguous", 0},
		{"in flight upstream compensation on last attempt halts", keyRoute, "compensation", 3, dispatch.Result{Outcome: dispatch.Retry, Status: 425, Reason: dispatch.ReasonInFlightUpstream, Err: boom}, outbox.StatusCompensationFailed, false, "retry", 0},
		{"answer too large to read parks at once", keyRoute, "forward", 1, dispatch.Result{Outcome: dispatch.Ambiguous, Unread: true, Status: 200, Err: boom}, outbox.StatusOutcomeUnknown, false, "ambiguous", 0},
		{"compensation answer too large to read parks", keyRoute, "compensation", 1, dispatch.Result{Outcome: dispatch.Ambiguous, Unread: true, Status: 200, Err: boom}, outbox.StatusOutcomeUnknown, false, "ambiguous", 0},
		{"zero outcome is ambiguous", keyRoute, "forward", 1, dispatch.Result{}, outbox.StatusPending, false, "ambiguous", 0},
		{"zero outcome parks non_idempotent", nonRoute, "forward", 1, dispatch.Result{}, outbox.StatusOutcomeUnknown, false, "ambiguous", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			row := &claimedRow{Seq: 1, Kind: c.kind, Attempts: c.attempt}
			got := decide(env, row, c.route, "a", c.res)
			if got.Status != c.status || got.GiveBack != c.giveBack || got.outcome != c.outcome {
				t.Fatalf("got status %s giveBack %v outcome %s; want %s %v %s", got.Status, got.GiveBack, got.outcome, c.status, c.giveBack, c.outcome)
			}
			if got.Delay < c.minDelay {
				t.Fatalf("delay %v below floor %v", got.Delay, c.minDelay)
			}
			if got.Status != outbox.StatusSucceeded && got.LastError == nil {
				t.Fatal("a non-success must record last_error")
			}
			if got.Status == outbox.StatusSucceeded && len(got.Response) == 0 {
				t.Fatal("a success must record a response (null at least)")
			}
			if got.Status == outbox.StatusPending && got.KeepNext {
				t.Fatal("a rescheduled row must get a new next_attempt_at")
			}
		})
	}
}

func TestDecideCutOffRetriesAtOnce(t *testing.T) {
	t.Parallel()
	route := &Route{Class: "key_idempotent", MaxAttempts: 5, Backoff: Backoff{Base: time.Minute, Cap: time.Hour}}
	row := &claimedRow{Kind: "forward", Attempts: 2}
	c := decide(decideEnv{rand: rand.New(rand.NewPCG(2, 2))}, row, route, "a",
		dispatch.Result{Outcome: dispatch.Ambiguous, Err: errCutOff})
	if c.Status != outbox.StatusPending || c.GiveBack || c.Delay != 0 {
		t.Fatalf("cut-off call: status %s giveBack %v delay %v; want pending, consumed, due now", c.Status, c.GiveBack, c.Delay)
	}
}

func TestSanitize(t *testing.T) {
	t.Parallel()
	msg := "bad\x00text\xff"
	c := completion{Completion: store.Completion{Status: outbox.StatusSucceeded, LastError: &msg, Response: []byte(`{"a":"\u0000"}`)}}
	c.sanitize()
	if *c.LastError != "badtext\uFFFD" {
		t.Fatalf("last_error not cleaned: %q", *c.LastError)
	}
	if want := `{"body":"{\"a\":\"\\u0000\"}","truncated":false}`; string(c.Response) != want {
		t.Fatalf("a response with \\u0000 (which jsonb refuses) kept as %s, want its text %s", c.Response, want)
	}
	// Kept as text once (by the adapter, dispatch.ResponseJSON), it is
	// storable and stays as it is: the text \u0000 is no escape.
	wrapped := c.Response
	c = completion{Completion: store.Completion{Status: outbox.StatusSucceeded, Response: wrapped}}
	c.sanitize()
	if string(c.Response) != string(wrapped) {
		t.Fatalf("an answer already kept as text was wrapped again: %s, want %s", c.Response, wrapped)
	}
	c = completion{Completion: store.Completion{Status: outbox.StatusSucceeded, Response: []byte("not json")}}
	c.sanitize()
	if string(c.Response) != `{"body":"not json","truncated":false}` {
		t.Fatalf("non-JSON response: %s", c.Response)
	}
}

// TestClaimsDurableOnlyWithNonIdempotentRoutes: claims commit without
// waiting for disk unless a route could repeat an effect on a lost claim.
func TestClaimsDurableOnlyWithNonIdempotentRoutes(t *testing.T) {
	t.Parallel()
	e := &Engine{cfg: Config{Workers: 4}.WithDefaults(), gatePolicy: map[string]GatePolicy{}}
	rt := &Routing{Registry: &dispatch.Registry{}, Routes: map[string]*Route{"t": {Tool: "t", Adapter: "a", Class: outbox.ClassKeyIdempotent}}}
	e.attachGates(rt)
	if rt.durableClaims {
		t.Fatal("key_idempotent routes only: claims need not wait for disk")
	}
	rt = &Routing{Registry: &dispatch.Registry{}, Routes: map[string]*Route{
		"t":    {Tool: "t", Adapter: "a", Class: outbox.ClassKeyIdempotent},
		"wire": {Tool: "wire", Adapter: "a", Class: outbox.ClassNonIdempotent},
	}}
	e.attachGates(rt)
	if !rt.durableClaims {
		t.Fatal("a non_idempotent route makes claims durable")
	}
}

// TestDecideCountedUnsentRecordsNoAnswer: a compensation's attempt to a
// missing destination counts, but nothing reached the provider: its
// completion records no answer (its audit entry a reason instead), while
// its last_error names the destination.
func TestDecideCountedUnsentRecordsNoAnswer(t *testing.T) {
	t.Parallel()
	route := &Route{Tool: "t", Class: "key_idempotent", MaxAttempts: 3, Backoff: Backoff{Base: time.Second, Cap: time.Minute}}
	env := decideEnv{rand: rand.New(rand.NewPCG(1, 1))}
	res := dispatch.Result{Outcome: dispatch.Retry, NotSent: true, AwaitsFix: true, Err: errors.New("topic undo does not exist")}
	for _, attempt := range []int{1, 3} {
		c := decide(env, &claimedRow{Seq: 1, Kind: outbox.KindCompensation, Attempts: attempt}, route, "a", res)
		if c.GiveBack || !c.NoRequest || c.Note != noteNotSentCounted || c.LastError == nil || !strings.Contains(*c.LastError, "topic undo does not exist") {
			t.Errorf("attempt %d: giveBack %v noRequest %v note %q last_error %v", attempt, c.GiveBack, c.NoRequest, c.Note, c.LastError)
		}
	}
	// A forward row's is given back, with the usual note.
	if c := decide(env, &claimedRow{Seq: 1, Kind: outbox.KindForward, Attempts: 1}, route, "a", res); !c.GiveBack || c.Note != noteNotSent {
		t.Errorf("forward: giveBack %v note %q", c.GiveBack, c.Note)
	}
}

// TestDecideSentAttemptNotesWhy: an attempt sent that did not succeed
// carries its result's reason to its audit entry; a success, and a request
// that never left, keep theirs.
func TestDecideSentAttemptNotesWhy(t *testing.T) {
	t.Parallel()
	route := &Route{Tool: "t", Class: "key_idempotent", MaxAttempts: 3, Backoff: Backoff{Base: time.Second, Cap: time.Minute}}
	env := decideEnv{rand: rand.New(rand.NewPCG(1, 1))}
	row := func() *claimedRow { return &claimedRow{Seq: 1, Kind: outbox.KindForward, Attempts: 1} }
	for _, tc := range []struct {
		res  dispatch.Result
		note string
	}{
		{dispatch.Result{Outcome: dispatch.Ambiguous, Reason: dispatch.ReasonTimeout, Err: errors.New("context deadline exceeded")}, "sent: timeout"},
		{dispatch.Result{Outcome: dispatch.Retry, Status: 503, Reason: dispatch.ReasonHTTP5xx}, "sent: http_5xx"},
		{dispatch.Result{Outcome: dispatch.Terminal, Status: 422, Reason: dispatch.ReasonHTTP4xx}, "sent: http_4xx"},
		{dispatch.Result{Outcome: dispatch.Auth, Status: 401, Reason: dispatch.ReasonAuth}, "sent: auth"},
		{dispatch.Result{Outcome: dispatch.Success, Status: 200, Reason: dispatch.ReasonHTTP2xx}, ""},
		{dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: dispatch.ReasonConnect}, noteNotSent},
		{dispatch.Result{Outcome: dispatch.Retry, Status: 503}, ""},
	} {
		c := decide(env, row(), route, "a", tc.res)
		if c.Note != tc.note || c.NoRequest != (tc.note == noteNotSent) {
			t.Errorf("%v %q: note %q noRequest %v, want note %q", tc.res.Outcome, tc.res.Reason, c.Note, c.NoRequest, tc.note)
		}
	}
}
