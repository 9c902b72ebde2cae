package execplugin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drainer-io/drainer/dispatch"
	pluginpb "github.com/drainer-io/drainer/dispatch/execplugin/proto"
)

func TestResult(t *testing.T) {
	for _, tc := range []struct {
		name string
		resp *pluginpb.DispatchResponse
		want dispatch.Result
		err  string // substring of Err; "" means nil
	}{
		{
			name: "success",
			resp: &pluginpb.DispatchResponse{Outcome: pluginpb.Outcome_OUTCOME_SUCCESS, Status: 201, Response: []byte(`{"id":7}`),
				RetryAfterMs: 5, NotSent: true, Error: "ignored"},
			want: dispatch.Result{Outcome: dispatch.Success, Status: 201, Response: json.RawMessage(`{"id":7}`), Reason: "plugin_success"},
		},
		{
			name: "replay with text response",
			resp: &pluginpb.DispatchResponse{Outcome: pluginpb.Outcome_OUTCOME_REPLAY, Response: []byte("ok"), Reason: "replay"},
			want: dispatch.Result{Outcome: dispatch.Replay, Response: json.RawMessage(`{"body":"ok","truncated":false}`), Reason: "replay"},
		},
		{
			name: "retry",
			resp: &pluginpb.DispatchResponse{Outcome: pluginpb.Outcome_OUTCOME_RETRY, RetryAfterMs: 1500, NotSent: true,
				Status: 503, Reason: "http_5xx", Error: "down\nfor maintenance",
				Problem: &pluginpb.Problem{Title: "Unavailable", Status: 503}},
			want: dispatch.Result{Outcome: dispatch.Retry, RetryAfter: 1500 * time.Millisecond, NotSent: true, Status: 503,
				Reason: "http_5xx", Problem: &dispatch.Problem{Title: "Unavailable", Status: 503}},
			err: "plugin answered retry (status 503): down for maintenance: Unavailable",
		},
		{
			name: "huge retry after is capped, negative ignored",
			resp: &pluginpb.DispatchResponse{Outcome: pluginpb.Outcome_OUTCOME_RETRY, RetryAfterMs: 1 << 62},
			want: dispatch.Result{Outcome: dispatch.Retry, RetryAfter: maxRetryAfter, Reason: "plugin_retry"},
			err:  "plugin answered retry",
		},
		{
			name: "ambiguous is never NotSent",
			resp: &pluginpb.DispatchResponse{Outcome: pluginpb.Outcome_OUTCOME_AMBIGUOUS, NotSent: true},
			want: dispatch.Result{Outcome: dispatch.Ambiguous, Reason: "plugin_ambiguous"},
			err:  "plugin answered ambiguous",
		},
		{
			name: "unspecified outcome",
			resp: &pluginpb.DispatchResponse{Reason: "fine", Error: "oops"},
			want: dispatch.Result{Outcome: dispatch.Ambiguous, Reason: ReasonPluginProtocol},
			err:  "plugin answered outcome 0, which does not exist",
		},
		{
			name: "unknown outcome",
			resp: &pluginpb.DispatchResponse{Outcome: 42},
			want: dispatch.Result{Outcome: dispatch.Ambiguous, Reason: ReasonPluginProtocol},
			err:  "outcome 42",
		},
		{
			name: "reason outside the vocabulary",
			resp: &pluginpb.DispatchResponse{Outcome: pluginpb.Outcome_OUTCOME_TERMINAL, Reason: "Card Declined for user 42"},
			want: dispatch.Result{Outcome: dispatch.Terminal, Reason: ReasonPluginProtocol},
			err:  "plugin answered terminal",
		},
		{
			name: "auth",
			resp: &pluginpb.DispatchResponse{Outcome: pluginpb.Outcome_OUTCOME_AUTH, Status: 401},
			want: dispatch.Result{Outcome: dispatch.Auth, Status: 401, Reason: "plugin_auth"},
			err:  "plugin answered auth (status 401)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := result(tc.resp)
			gotErr := got.Err
			got.Err = nil
			if g, w := describe(got), describe(tc.want); g != w {
				t.Errorf("result:\n got %s\nwant %s", g, w)
			}
			switch {
			case tc.err == "" && gotErr != nil:
				t.Errorf("Err = %v, want nil", gotErr)
			case tc.err != "" && (gotErr == nil || !strings.Contains(gotErr.Error(), tc.err)):
				t.Errorf("Err = %v, want one containing %q", gotErr, tc.err)
			}
		})
	}
}

func describe(r dispatch.Result) string {
	b, _ := json.Marshal(r)
	return string(b)
}

func TestCallFailedByCode(t *testing.T) {
	a := &Adapter{}
	for _, tc := range []struct {
		code    codes.Code
		outcome dispatch.Outcome
		notSent bool
		reason  string
	}{
		{codes.DeadlineExceeded, dispatch.Ambiguous, false, dispatch.ReasonTimeout},
		{codes.Unauthenticated, dispatch.Auth, false, dispatch.ReasonAuth},
		{codes.PermissionDenied, dispatch.Auth, false, dispatch.ReasonAuth},
		{codes.Unimplemented, dispatch.Retry, true, ReasonPluginProtocol},
		{codes.InvalidArgument, dispatch.Terminal, false, ReasonPluginRejected},
		{codes.FailedPrecondition, dispatch.Terminal, false, ReasonPluginRejected},
		{codes.ResourceExhausted, dispatch.Retry, false, ReasonPluginBusy},
		{codes.Aborted, dispatch.Retry, false, ReasonPluginBusy},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			r := a.callFailed(t.Context(), nil, status.Error(tc.code, "plugin says\nno"))
			if r.Outcome != tc.outcome || r.NotSent != tc.notSent || r.Reason != tc.reason || r.Err == nil {
				t.Errorf("got %s NotSent=%v reason %q err %v", r.Outcome, r.NotSent, r.Reason, r.Err)
			}
			if r.Err != nil && strings.Contains(r.Err.Error(), "\n") {
				t.Errorf("Err spans lines: %q", r.Err)
			}
		})
	}
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		r := a.callFailed(ctx, nil, status.Error(codes.Canceled, "context canceled"))
		if r.Outcome != dispatch.Ambiguous || r.Reason != dispatch.ReasonCancelled || !errors.Is(r.Err, context.Canceled) {
			t.Errorf("got %s reason %q err %v", r.Outcome, r.Reason, r.Err)
		}
	})
}

func TestRequestRejectsInvalidUTF8(t *testing.T) {
	m := &dispatch.Message{Key: "k", Traceparent: "\xff"}
	if _, err := request(t.Context(), m); err == nil || !strings.Contains(err.Error(), "traceparent") {
		t.Errorf("err %v, want one naming traceparent", err)
	}
}

func TestRestartDelay(t *testing.T) {
	want := []time.Duration{0, 0, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}
	for n, w := range want {
		if got := restartDelay(n); got != w {
			t.Errorf("restartDelay(%d) = %v, want %v", n, got, w)
		}
	}
	for _, n := range []int{12, 100, 1 << 30} {
		if got := restartDelay(n); got != restartBackoffCap {
			t.Errorf("restartDelay(%d) = %v, want the cap", n, got)
		}
	}
}

func TestStderrFilter(t *testing.T) {
	long := strings.Repeat("x", 3*maxLogLine) + `{"@message":1}`
	in := strings.Join([]string{
		`{"@message":"fine","@level":"info"}`,
		`{"@message":1}`,
		`{"@level":null,"x":2}`,
		`  {"@timestamp":{}} `,
		`plain "@text"`,
		long,
		`{"@message":["last line, no newline"]}`,
	}, "\n")
	f := &stderrFilter{r: bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(in)), 2*maxLogLine), c: io.NopCloser(nil)}
	out, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		`{"@message":"fine","@level":"info"}`,
		`[DEBUG] {"@message":1}`,
		`[DEBUG] {"@level":null,"x":2}`,
		`[DEBUG]   {"@timestamp":{}} `,
		`plain "@text"`,
		long,
		`[DEBUG] {"@message":["last line, no newline"]}`,
	}, "\n")
	if string(out) != want {
		t.Errorf("filtered:\n%.300s\nwant\n%.300s", out, want)
	}
}

func TestLineLogger(t *testing.T) {
	var buf bytes.Buffer
	w := &lineLogger{log: slog.New(slog.NewTextHandler(&buf, nil)), level: slog.LevelInfo, source: "plugin.stderr"}
	for _, s := range []string{"hel", "lo\nwor", "ld\r\n\n", strings.Repeat("é", maxLogLine)} {
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "msg=hello") || !strings.Contains(lines[1], "msg=world") ||
		!strings.Contains(lines[0], "logger=plugin.stderr") {
		t.Fatalf("logged:\n%s", buf.String())
	}
	if !strings.Contains(lines[2], "ééé") || strings.Contains(lines[2], "\uFFFD") {
		t.Errorf("a long line is not cut at a character boundary: %.80s", lines[2])
	}
}

func TestHCLogAdapterLevels(t *testing.T) {
	var buf bytes.Buffer
	h := newHCLogAdapter(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))).Named("go-plugin")
	if h.IsDebug() || !h.IsInfo() || h.GetLevel().String() != "info" {
		t.Errorf("IsDebug %v IsInfo %v GetLevel %v", h.IsDebug(), h.IsInfo(), h.GetLevel())
	}
	h.Debug("hidden")
	h.With("k", "v").Named("echo").Warn("careful", "n", 1)
	got := buf.String()
	if strings.Contains(got, "hidden") || !strings.Contains(got, `level=WARN msg=careful logger=go-plugin.echo k=v n=1`) {
		t.Errorf("logged: %s", got)
	}
}
