package drainer

import (
	"context"

	"github.com/drainer-io/drainer/dispatch"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

var traceContext = propagation.TraceContext{}

// startDispatchSpan continues the agent's trace (the row's traceparent, if
// any) with a span for the time the row waited in the queue (queueSpan) and
// a span for one attempt, and returns the traceparent to send upstream.
// With the default no-op tracer nothing is recorded and the agent's
// traceparent is passed through unchanged.
func (e *Engine) startDispatchSpan(ctx context.Context, row *claimedRow, m *dispatch.Message, adapter string) (context.Context, trace.Span) {
	if m.Traceparent != "" {
		ctx = traceContext.Extract(ctx, propagation.MapCarrier{"traceparent": m.Traceparent})
	}
	// Under the agent's span, the two are siblings; a row enqueued
	// without a trace starts one at its queue span, the attempt its child,
	// so that one row's wait and attempt are one trace, not two.
	if queued := e.queueSpan(ctx, row); !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = queued
	}
	ctx, span := e.tracer.Start(ctx, "drainer.dispatch "+m.Tuple.ToolName, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("drainer.tool_name", m.Tuple.ToolName),
			attribute.String("drainer.adapter", adapter),
			attribute.String("drainer.kind", string(m.Kind)),
			attribute.Int("drainer.attempt", m.Attempt),
			attribute.Int64("drainer.outbox_seq", m.Seq),
		))
	carrier := propagation.MapCarrier{}
	traceContext.Inject(ctx, carrier)
	if tp := carrier.Get("traceparent"); tp != "" {
		m.Traceparent = tp
	}
	return ctx, span
}

// queueSpan records, in the agent's trace, the time the row waited in the
// queue before this attempt: from when it was due (its enqueue, for a
// first attempt; the end of its backoff, for a retry) to its claim, both
// read on the database clock. It returns ctx with the span (ctx itself
// when the row has no wait to record).
func (e *Engine) queueSpan(ctx context.Context, row *claimedRow) context.Context {
	if row.Due.IsZero() || row.DBNow.Before(row.Due) {
		return ctx
	}
	ctx, span := e.tracer.Start(ctx, "drainer.queue "+row.ToolName, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(row.Due),
		trace.WithAttributes(
			attribute.String("drainer.tool_name", row.ToolName),
			attribute.String("drainer.kind", string(row.Kind)),
			attribute.Int("drainer.attempt", row.Attempts),
			attribute.Int64("drainer.outbox_seq", row.Seq),
			attribute.Float64("drainer.queue_seconds", row.DBNow.Sub(row.Due).Seconds()),
		))
	span.End(trace.WithTimestamp(row.DBNow))
	return ctx
}

// endDispatchSpan records the attempt's outcome on its span.
func endDispatchSpan(span trace.Span, res dispatch.Result) {
	span.SetAttributes(attribute.String("drainer.outcome", res.Outcome.String()))
	if res.Status > 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", res.Status))
	}
	if !res.Succeeded() {
		span.SetStatus(codes.Error, res.Reason)
	}
	span.End()
}

func defaultTracer() trace.Tracer { return noop.NewTracerProvider().Tracer("drainer") }
