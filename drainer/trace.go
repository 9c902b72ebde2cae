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
// any) with a span for one attempt, and returns the traceparent to send
// upstream. With the default no-op tracer nothing is recorded and the
// agent's traceparent is passed through unchanged.
func (e *Engine) startDispatchSpan(ctx context.Context, m *dispatch.Message, adapter string) (context.Context, trace.Span) {
	if m.Traceparent != "" {
		ctx = traceContext.Extract(ctx, propagation.MapCarrier{"traceparent": m.Traceparent})
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
