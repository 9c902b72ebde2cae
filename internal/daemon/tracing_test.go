package daemon

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestTracerTakesTheStandardResourceVariables: the spans drainer exports
// over OTLP describe the service as the standard variables say
// (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), and as "drainer" with its
// version when they say nothing. Checked on what a local OTLP/HTTP
// receiver gets.
func TestTracerTakesTheStandardResourceVariables(t *testing.T) {
	for _, tc := range []struct {
		name, serviceName, attributes string
		want                          map[string]string
	}{
		{name: "defaults", want: map[string]string{"service.name": "drainer", "service.version": "v9.9.9", "telemetry.sdk.language": "go"}},
		{name: "from the environment", serviceName: "payments-drainer", attributes: "deployment.environment.name=staging,service.name=overridden",
			want: map[string]string{"service.name": "payments-drainer", "deployment.environment.name": "staging", "service.version": "v9.9.9"}},
		{name: "attributes only", attributes: "service.name=agents-eu,k8s.namespace.name=agents",
			want: map[string]string{"service.name": "agents-eu", "k8s.namespace.name": "agents"}},
		// A malformed variable costs what it says, not the tracing (nor
		// the drain): the rest of the resource is kept.
		{name: "malformed attributes", serviceName: "payments-drainer", attributes: "no-equals-sign,team=%zz",
			want: map[string]string{"service.name": "payments-drainer", "service.version": "v9.9.9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan map[string]string, 16)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(r.Body)
				var req collectortrace.ExportTraceServiceRequest
				if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
					http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
					return
				}
				for _, rs := range req.GetResourceSpans() {
					attrs := map[string]string{}
					for _, kv := range rs.GetResource().GetAttributes() {
						attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
					}
					got <- attrs
				}
				w.Header().Set("Content-Type", "application/x-protobuf")
				b, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
				_, _ = w.Write(b)
			}))
			defer srv.Close()
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
			t.Setenv("OTEL_SERVICE_NAME", tc.serviceName)
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", tc.attributes)

			tracer, shutdown, err := newTracer(t.Context(), "v9.9.9", slog.New(slog.DiscardHandler))
			if err != nil || tracer == nil {
				t.Fatalf("newTracer: %v, %v", tracer, err)
			}
			_, span := tracer.Start(t.Context(), "drainer.dispatch t")
			span.End()
			shutdown(t.Context()) // flushes the span
			var attrs map[string]string
			select {
			case attrs = <-got:
			case <-time.After(time.Minute):
				t.Fatal("the OTLP receiver got no span")
			}
			for k, v := range tc.want {
				if attrs[k] != v {
					t.Errorf("resource %s = %q; want %q (resource %v)", k, attrs[k], v, attrs)
				}
			}
		})
	}
}
