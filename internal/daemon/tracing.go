package daemon

import (
	"context"
	"log/slog"
	"os"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// newTracer returns the tracer of the daemon: spans are exported over OTLP
// (HTTP) only when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (the exporter's own variables
// configure it further); otherwise nil (no-op: the agent's traceparent is
// still passed to providers). shutdown flushes pending spans.
func newTracer(ctx context.Context, version string, log *slog.Logger) (tracer trace.Tracer, shutdown func(context.Context), err error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, func(context.Context) {}, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("drainer"), semconv.ServiceVersion(version))),
	)
	log.Info("tracing: exporting spans over OTLP")
	return tp.Tracer("github.com/drainer-io/drainer"), func(ctx context.Context) { _ = tp.Shutdown(ctx) }, nil
}
