package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/execplugin/internal/wire"
	pluginpb "github.com/drainer-io/drainer/dispatch/execplugin/proto"
	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/outbox"
)

// Adapter makes one delivery attempt; see the package documentation.
type Adapter interface {
	Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result
}

// Info describes the plugin in drainer's logs.
type Info struct {
	Name    string
	Version string
}

// Serve serves a to drainer and returns only when drainer stops the plugin.
// It must be called from main; run outside drainer (without the handshake in
// its environment), it prints an explanation and exits with status 1.
func Serve(a Adapter, info Info) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: wire.Handshake,
		Plugins: plugin.PluginSet{
			wire.PluginName: &wire.GRPCPlugin{Impl: &server{impl: a, info: info}},
		},
		GRPCServer: plugin.DefaultGRPCServer,
	})
}

// stderr is the process's standard error as it was before Serve redirected
// os.Stderr to drainer's stdio stream: drainer reads it line by line and logs
// the JSON lines Logger writes at their level.
var stderr io.Writer = os.Stderr

// Logger returns a logger for the plugin: JSON lines on standard error, in
// the format drainer's plugin host (hashicorp/go-plugin) understands, so each
// line lands in drainer's log at its own level with its attributes. Never log
// a payload or a secret.
func Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{
		Level: slog.LevelDebug - 4,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.LevelKey:
				return slog.String("@level", hclogLevel(a.Value.Any().(slog.Level)))
			case slog.MessageKey:
				return slog.String("@message", a.Value.String())
			case slog.TimeKey:
				return slog.String("@timestamp", a.Value.Time().Format("2006-01-02T15:04:05.000000Z07:00"))
			}
			return a
		},
	}))
}

func hclogLevel(l slog.Level) string {
	switch {
	case l < slog.LevelDebug:
		return "trace"
	case l < slog.LevelInfo:
		return "debug"
	case l < slog.LevelWarn:
		return "info"
	case l < slog.LevelError:
		return "warn"
	default:
		return "error"
	}
}

// server adapts an Adapter to the gRPC service.
type server struct {
	pluginpb.UnimplementedAdapterServer
	impl Adapter
	info Info
}

func (s *server) Info(context.Context, *pluginpb.InfoRequest) (*pluginpb.InfoResponse, error) {
	return &pluginpb.InfoResponse{
		Name:            utf8Text(s.info.Name),
		Version:         utf8Text(s.info.Version),
		ProtocolVersion: wire.ProtocolVersion,
	}, nil
}

func (s *server) Dispatch(ctx context.Context, req *pluginpb.DispatchRequest) (resp *pluginpb.DispatchResponse, _ error) {
	defer func() {
		if v := recover(); v != nil {
			Logger().Error("panic in Dispatch", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			resp = &pluginpb.DispatchResponse{
				Outcome: pluginpb.Outcome_OUTCOME_AMBIGUOUS,
				Reason:  "plugin_panic",
				Error:   "the plugin panicked during the attempt",
			}
		}
	}()
	return response(s.impl.Dispatch(ctx, message(req))), nil
}

func (s *server) KeyTTL(ctx context.Context, _ *pluginpb.KeyTTLRequest) (*pluginpb.KeyTTLResponse, error) {
	k, ok := s.impl.(dispatch.KeyTTLer)
	if !ok {
		return &pluginpb.KeyTTLResponse{}, nil
	}
	ttl, err := k.KeyTTL(ctx)
	if err != nil {
		return nil, err
	}
	if ttl < 0 {
		return nil, errors.New("negative key_ttl")
	}
	ms := ceilMillis(ttl)
	return &pluginpb.KeyTTLResponse{TtlMs: &ms}, nil
}

// message converts a request to the Message the Adapter sees.
func message(req *pluginpb.DispatchRequest) *dispatch.Message {
	return &dispatch.Message{
		Key: req.GetKey(),
		Tuple: idemkey.Tuple{
			AgentRunID:    req.GetAgentRunId(),
			StepID:        req.GetStepId(),
			ToolName:      req.GetToolName(),
			BusinessScope: req.GetBusinessScope(),
		},
		Kind:        outbox.Kind(req.GetKind()),
		Payload:     req.GetPayload(),
		Attempt:     int(req.GetAttempt()),
		Seq:         req.GetSeq(),
		Traceparent: req.GetTraceparent(),
	}
}

// response converts the Adapter's Result to the wire. A zero Outcome stays
// OUTCOME_UNSPECIFIED, which drainer treats as ambiguous.
func response(r dispatch.Result) *pluginpb.DispatchResponse {
	resp := &pluginpb.DispatchResponse{
		Outcome:      pluginpb.Outcome(r.Outcome),
		RetryAfterMs: ceilMillis(max(r.RetryAfter, 0)),
		NotSent:      r.NotSent,
		Status:       int32(r.Status),
		Response:     r.Response,
		Reason:       utf8Text(r.Reason),
	}
	if r.Err != nil {
		resp.Error = utf8Text(r.Err.Error())
	}
	if p := r.Problem; p != nil {
		resp.Problem = &pluginpb.Problem{
			Type:     utf8Text(p.Type),
			Title:    utf8Text(p.Title),
			Status:   int32(p.Status),
			Detail:   utf8Text(p.Detail),
			Instance: utf8Text(p.Instance),
		}
	}
	return resp
}

// utf8Text makes s valid UTF-8, which protobuf requires of strings (a
// provider's error text may not be).
func utf8Text(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// ceilMillis rounds d >= 0 up to whole milliseconds, so that a floor of
// 0.5 ms is not lost.
func ceilMillis(d time.Duration) int64 {
	ms := d / time.Millisecond
	if d%time.Millisecond != 0 {
		ms++
	}
	return int64(ms)
}
