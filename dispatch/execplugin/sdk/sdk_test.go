package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/execplugin/internal/wire"
	pluginpb "github.com/drainer-io/drainer/dispatch/execplugin/proto"
	"github.com/drainer-io/drainer/outbox"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type adapterFunc func(ctx context.Context, m *dispatch.Message) dispatch.Result

func (f adapterFunc) Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result {
	return f(ctx, m)
}

type withTTL struct {
	adapterFunc
	ttl time.Duration
	err error
}

func (w withTTL) KeyTTL(context.Context) (time.Duration, error) { return w.ttl, w.err }

func TestDispatchRoundTrip(t *testing.T) {
	req := &pluginpb.DispatchRequest{
		Key: "k1", AgentRunId: "run", StepId: "step", ToolName: "tool", BusinessScope: "scope",
		Kind: string(outbox.KindForward), Payload: []byte(`{"a":1}`), Attempt: 2, Seq: 9, Traceparent: "tp",
	}
	var got *dispatch.Message
	s := &server{impl: adapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		got = m
		return dispatch.Result{
			Outcome: dispatch.Retry, RetryAfter: 1500*time.Microsecond + time.Second, NotSent: true, Status: 503,
			Reason: "busy\xff", Err: errors.New("down \xff"), Problem: &dispatch.Problem{Title: "t", Status: 503},
		}
	})}
	resp, err := s.Dispatch(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got.Key != "k1" || got.Tuple.AgentRunID != "run" || got.Tuple.StepID != "step" || got.Tuple.ToolName != "tool" ||
		got.Tuple.BusinessScope != "scope" || got.Kind != outbox.KindForward || string(got.Payload) != `{"a":1}` ||
		got.Attempt != 2 || got.Seq != 9 || got.Traceparent != "tp" {
		t.Errorf("message %+v", got)
	}
	want := &pluginpb.DispatchResponse{
		Outcome: pluginpb.Outcome_OUTCOME_RETRY, RetryAfterMs: 1002, NotSent: true, Status: 503,
		Reason: "busy\uFFFD", Error: "down \uFFFD", Problem: &pluginpb.Problem{Title: "t", Status: 503},
	}
	if g, w := jsonOf(resp), jsonOf(want); g != w {
		t.Errorf("response\n got %s\nwant %s", g, w)
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestDispatchPanic(t *testing.T) {
	s := &server{impl: adapterFunc(func(context.Context, *dispatch.Message) dispatch.Result { panic("boom") })}
	resp, err := s.Dispatch(t.Context(), &pluginpb.DispatchRequest{})
	if err != nil || resp.GetOutcome() != pluginpb.Outcome_OUTCOME_AMBIGUOUS || resp.GetReason() != "plugin_panic" {
		t.Errorf("got %v, %v", resp, err)
	}
}

func TestZeroOutcomeStaysUnspecified(t *testing.T) {
	if got := response(dispatch.Result{}).GetOutcome(); got != pluginpb.Outcome_OUTCOME_UNSPECIFIED {
		t.Errorf("outcome %v", got)
	}
	// The enum values are dispatch.Outcome's.
	for o := dispatch.Success; o <= dispatch.Auth; o++ {
		if name := pluginpb.Outcome(o).String(); name != "OUTCOME_"+upper(o.String()) {
			t.Errorf("dispatch %s is %s on the wire", o, name)
		}
	}
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

func TestKeyTTL(t *testing.T) {
	plain := adapterFunc(func(context.Context, *dispatch.Message) dispatch.Result { return dispatch.Result{} })
	for _, tc := range []struct {
		name    string
		impl    Adapter
		want    *int64
		wantErr bool
	}{
		{"not a KeyTTLer", plain, nil, false},
		{"unlimited", withTTL{plain, 0, nil}, ptr(0), false},
		{"a day", withTTL{plain, 24 * time.Hour, nil}, ptr(86_400_000), false},
		{"error", withTTL{plain, 0, errors.New("no")}, nil, true},
		{"negative", withTTL{plain, -time.Second, nil}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := (&server{impl: tc.impl}).KeyTTL(t.Context(), &pluginpb.KeyTTLRequest{})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v", err)
			}
			if err == nil && jsonOf(resp.TtlMs) != jsonOf(tc.want) {
				t.Errorf("ttl_ms %v, want %v", jsonOf(resp.TtlMs), jsonOf(tc.want))
			}
		})
	}
}

func ptr(v int64) *int64 { return &v }

func TestInfo(t *testing.T) {
	resp, err := (&server{info: Info{Name: "n", Version: "v"}}).Info(t.Context(), &pluginpb.InfoRequest{})
	if err != nil || resp.GetName() != "n" || resp.GetVersion() != "v" || resp.GetProtocolVersion() != wire.ProtocolVersion {
		t.Errorf("got %v, %v", resp, err)
	}
}

// TestLogger checks the line format drainer's plugin host (go-plugin)
// parses: @level, @message and @timestamp strings, attributes beside them.
func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	stderr = &buf
	t.Cleanup(func() { stderr = os.Stderr })
	log := Logger()
	log.Log(t.Context(), slog.LevelDebug-4, "t")
	log.Debug("d")
	log.Info("i", "n", 1)
	log.Warn("w")
	log.Error("e", slog.Group("g", "level", "x"))
	var levels []string
	for line := range strings.Lines(buf.String()) {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatal(err)
		}
		ts, _ := entry["@timestamp"].(string)
		if _, err := time.Parse("2006-01-02T15:04:05.000000Z07:00", ts); err != nil {
			t.Errorf("@timestamp in %s: %v", line, err)
		}
		if _, ok := entry["@message"].(string); !ok {
			t.Errorf("@message in %s", line)
		}
		levels = append(levels, entry["@level"].(string))
	}
	if got := strings.Join(levels, ","); got != "trace,debug,info,warn,error" {
		t.Errorf("levels %s", got)
	}
	if !strings.Contains(buf.String(), `"n":1`) || !strings.Contains(buf.String(), `"g":{"level":"x"}`) {
		t.Errorf("attributes lost: %s", buf.String())
	}
}
