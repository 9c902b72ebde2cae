package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"go.opentelemetry.io/otel/attribute"
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
// still passed to providers). The spans' resource is traceResource's.
// shutdown flushes pending spans.
func newTracer(ctx context.Context, version string, log *slog.Logger) (tracer trace.Tracer, shutdown func(context.Context), err error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, func(context.Context) {}, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, err
	}
	res, err := traceResource(ctx, version)
	if err != nil {
		// A typo in a tracing variable is no reason not to drain: the
		// resource keeps what could be read.
		log.Warn("tracing: part of the resource could not be read; going on without it", "err", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	log.Info("tracing: exporting spans over OTLP", "service_name", serviceName(res))
	return tp.Tracer("github.com/drainer-io/drainer"), func(ctx context.Context) { _ = tp.Shutdown(ctx) }, nil
}

// traceResource describes the daemon in its spans: service.name "drainer"
// and service.version, the SDK's telemetry.sdk.*, then the standard
// variables OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, which override
// what comes before them (OTEL_SERVICE_NAME last). A variable that cannot
// be read is reported in err, and res keeps the rest (never nil).
func traceResource(ctx context.Context, version string) (res *resource.Resource, err error) {
	base := []attribute.KeyValue{semconv.ServiceName("drainer"), semconv.ServiceVersion(version)}
	res, err = resource.New(ctx, resource.WithAttributes(base...), resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		err = fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES / OTEL_SERVICE_NAME: %w", err)
	}
	if res == nil {
		res = resource.NewSchemaless(base...)
	}
	return res, err
}

// serviceName is res's service.name.
func serviceName(res *resource.Resource) string {
	v, _ := res.Set().Value(semconv.ServiceNameKey)
	return v.AsString()
}
