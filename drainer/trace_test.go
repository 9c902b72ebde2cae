package drainer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestDispatchContinuesAgentTrace: a row enqueued with a traceparent is
// dispatched inside a child span of the agent's trace, and the provider gets
// the child's traceparent (same trace id, new parent span id).
func TestDispatchContinuesAgentTrace(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	const agentTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	const agentSpan = "00f067aa0ba902b7"
	if _, err := pool.Exec(t.Context(), "SELECT drainer.enqueue('r', 's', 't', '', '{}', $1)", "00-"+agentTrace+"-"+agentSpan+"-01"); err != nil {
		t.Fatal(err)
	}
	tp2, span, queued := traceOneRow(t, pool)
	parts := strings.Split(tp2, "-")
	if len(parts) != 4 || parts[1] != agentTrace || parts[2] == agentSpan {
		t.Fatalf("provider got traceparent %q: want trace %s with a new parent span", tp2, agentTrace)
	}
	if span.Parent().TraceID().String() != agentTrace || span.Parent().SpanID().String() != agentSpan || span.SpanContext().SpanID().String() != parts[2] {
		t.Fatalf("span %s parent %s: not a child of the agent's span", span.SpanContext().SpanID(), span.Parent().SpanID())
	}
	// The time in the queue: a span of the agent's trace from the row's
	// enqueue to its claim, both on the database clock, ended before the
	// dispatch's started.
	if queued.Parent().TraceID().String() != agentTrace || queued.Parent().SpanID().String() != agentSpan {
		t.Fatalf("queue span's parent %s: not a child of the agent's span", queued.Parent().SpanID())
	}
	var enqueued, claimed time.Time
	if err := pool.QueryRow(t.Context(), "SELECT created_at, first_attempt_at FROM drainer.outbox").Scan(&enqueued, &claimed); err != nil {
		t.Fatal(err)
	}
	if !queued.StartTime().Equal(enqueued) || !queued.EndTime().Equal(claimed) {
		t.Fatalf("queue span from %s to %s; want from the enqueue (%s) to the claim (%s)", queued.StartTime(), queued.EndTime(), enqueued, claimed)
	}
}

// TestDispatchWithoutTraceIsOneTrace: a row enqueued without a traceparent
// starts one trace at its queue span, and its attempt is that span's
// child: the provider gets the attempt's traceparent in the same trace.
func TestDispatchWithoutTraceIsOneTrace(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	enqueueN(t, pool, "r", "t", 1)
	upstream, span, queued := traceOneRow(t, pool)
	if queued.Parent().IsValid() {
		t.Fatalf("queue span has parent %s: want the root of the row's trace", queued.Parent().SpanID())
	}
	if span.Parent().SpanID() != queued.SpanContext().SpanID() || span.SpanContext().TraceID() != queued.SpanContext().TraceID() {
		t.Fatalf("attempt span (trace %s, parent %s) is not the queue span's (trace %s, span %s) child",
			span.SpanContext().TraceID(), span.Parent().SpanID(), queued.SpanContext().TraceID(), queued.SpanContext().SpanID())
	}
	if want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"; upstream != want {
		t.Fatalf("provider got traceparent %q, want the attempt's %q", upstream, want)
	}
}

// traceOneRow drains the one row of pool's tool t through an engine that
// records its spans, and returns the traceparent the provider got and the
// row's dispatch and queue spans.
func traceOneRow(t *testing.T, pool *pgxpool.Pool) (upstream string, dispatched, queued sdktrace.ReadOnlySpan) {
	t.Helper()
	sent := make(chan string, 1)
	a := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		sent <- m.Traceparent
		return dispatch.Result{Outcome: dispatch.Success}
	})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": a}, &Route{Tool: "t"}), Config{Workers: 1, Tracer: tp.Tracer("test")})
	select {
	case upstream = <-sent:
	case <-time.After(10 * time.Second):
		t.Fatal("not dispatched")
	}
	testkit.WaitFor(t, 5*time.Second, "spans ended", func() (bool, string) { return len(rec.Ended()) == 2, "" })
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s
	}
	dispatched, queued = spans["drainer.dispatch t"], spans["drainer.queue t"]
	if dispatched == nil || queued == nil {
		t.Fatalf("spans %v: want drainer.queue t and drainer.dispatch t", spans)
	}
	return upstream, dispatched, queued
}
