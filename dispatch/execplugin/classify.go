package execplugin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/drainer-io/drainer/dispatch"
	pluginpb "github.com/drainer-io/drainer/dispatch/execplugin/proto"
	"github.com/drainer-io/drainer/dispatch/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// Reasons set by the adapter itself (the plugin sets its own on answers).
const (
	// ReasonPluginUnavailable: no plugin process runs and none could be
	// started (or the restart backoff holds); the call was not sent.
	ReasonPluginUnavailable = "plugin_unavailable"
	// ReasonPluginCrashed: the process exited during the call.
	ReasonPluginCrashed = "plugin_crashed"
	// ReasonPluginConnection: the connection to the process broke during the
	// call; the process is restarted.
	ReasonPluginConnection = "plugin_connection"
	// ReasonPluginBusy: the plugin refused the call for now (gRPC
	// Unavailable, ResourceExhausted or Aborted from a healthy process).
	ReasonPluginBusy = "plugin_busy"
	// ReasonPluginRejected: the plugin refused the request as invalid (gRPC
	// InvalidArgument, FailedPrecondition, OutOfRange, NotFound, AlreadyExists).
	ReasonPluginRejected = "plugin_rejected"
	// ReasonPluginProtocol: the plugin does not implement Dispatch, or
	// answered an outcome that does not exist or a reason outside the
	// vocabulary rules.
	ReasonPluginProtocol = "plugin_protocol"
	// ReasonPluginError: the call failed with another gRPC error.
	ReasonPluginError = "plugin_error"
)

// crashGrace is how long a failed call waits for the process to be seen
// exiting, to tell a crash from a refusal.
const crashGrace = 250 * time.Millisecond

// errTextLimit bounds the plugin's text quoted in Result.Err.
const errTextLimit = 300

// maxRetryAfter caps a plugin's retry_after_ms; the engine caps it again
// with the route's max_retry_after.
const maxRetryAfter = 7 * 24 * time.Hour

// request converts m to the wire; ctx's deadline is the attempt's.
func request(ctx context.Context, m *dispatch.Message) (*pluginpb.DispatchRequest, error) {
	t := m.Tuple
	for _, f := range [...]struct{ name, v string }{
		{"key", m.Key}, {"agent_run_id", t.AgentRunID}, {"step_id", t.StepID}, {"tool_name", t.ToolName},
		{"business_scope", t.BusinessScope}, {"kind", string(m.Kind)}, {"traceparent", m.Traceparent},
	} {
		if !utf8.ValidString(f.v) {
			return nil, fmt.Errorf("build request: %s is not valid UTF-8", f.name)
		}
	}
	req := &pluginpb.DispatchRequest{
		Key:           m.Key,
		AgentRunId:    t.AgentRunID,
		StepId:        t.StepID,
		ToolName:      t.ToolName,
		BusinessScope: t.BusinessScope,
		Kind:          string(m.Kind),
		Payload:       m.Payload,
		Attempt:       int32(min(max(m.Attempt, 0), math.MaxInt32)),
		Seq:           m.Seq,
		Traceparent:   m.Traceparent,
	}
	if dl, ok := ctx.Deadline(); ok {
		req.DeadlineUnixNano = dl.UnixNano()
	}
	return req, nil
}

// validReason is the vocabulary rule of a plugin's reason (a metric label).
var validReason = regexp.MustCompile(`^[a-z0-9_]{1,40}$`)

// result converts the plugin's answer to a Result. The plugin is trusted to
// classify, not to keep to the rules of the metric labels and stored answers:
// an unknown outcome becomes Ambiguous, an invalid reason
// ReasonPluginProtocol, and the response is stored as dispatch.ResponseJSON
// would store an HTTP body.
func result(resp *pluginpb.DispatchResponse) dispatch.Result {
	outcome := dispatch.Outcome(resp.GetOutcome())
	r := dispatch.Result{
		Outcome:    outcome,
		RetryAfter: min(millis(max(resp.GetRetryAfterMs(), 0)), maxRetryAfter),
		NotSent:    resp.GetNotSent(),
		Status:     int(resp.GetStatus()),
		Reason:     resp.GetReason(),
	}
	var protocolErr string
	if outcome < dispatch.Success || outcome > dispatch.Auth {
		r.Outcome = dispatch.Ambiguous
		protocolErr = fmt.Sprintf("plugin answered outcome %d, which does not exist; taken as ambiguous", resp.GetOutcome())
	}
	switch {
	case protocolErr != "":
		r.Reason = ReasonPluginProtocol
	case r.Reason == "":
		r.Reason = "plugin_" + r.Outcome.String()
	case !validReason.MatchString(r.Reason):
		r.Reason = ReasonPluginProtocol
	}
	switch r.Outcome {
	case dispatch.Success, dispatch.Replay:
		r.NotSent, r.RetryAfter = false, 0
		r.Response = dispatch.ResponseJSON("application/json", resp.GetResponse(), 0)
		return r
	case dispatch.Ambiguous:
		r.NotSent = false // it may have been sent, by definition
	}
	if p := resp.GetProblem(); p != nil {
		r.Problem = &dispatch.Problem{
			Type: p.GetType(), Title: p.GetTitle(), Status: int(p.GetStatus()), Detail: p.GetDetail(), Instance: p.GetInstance(),
		}
	}
	r.Err = &PluginError{Outcome: r.Outcome, Status: r.Status, Message: wire.OneLine(resp.GetError(), errTextLimit), Problem: r.Problem}
	if protocolErr != "" {
		r.Err = fmt.Errorf("%s: %w", protocolErr, r.Err)
	}
	return r
}

// PluginError is the error of an answer that is not a success, as the plugin
// worded it (Result.Err).
type PluginError struct {
	Outcome dispatch.Outcome
	Status  int
	// Message is the plugin's error text on one line, cut to about 300 bytes.
	Message string
	Problem *dispatch.Problem
}

// Error returns e.g. `plugin answered terminal (status 422): card declined`.
func (e *PluginError) Error() string {
	msg := "plugin answered " + e.Outcome.String()
	if e.Status != 0 {
		msg += fmt.Sprintf(" (status %d)", e.Status)
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.Problem != nil {
		msg += ": " + e.Problem.String()
	}
	return msg
}

// notRunning is the Result of a call that found no running process.
func notRunning(ctx context.Context, retryAfter time.Duration, err error) dispatch.Result {
	r := dispatch.Result{Outcome: dispatch.Retry, NotSent: true, RetryAfter: retryAfter, Reason: ReasonPluginUnavailable,
		Err: fmt.Errorf("request not sent: %w", err)}
	if errors.Is(ctx.Err(), context.Canceled) {
		r.Reason = dispatch.ReasonCancelled
	}
	return r
}

// callFailed classifies a failed gRPC call to p, which may have reached the
// plugin.
func (a *Adapter) callFailed(ctx context.Context, p *process, err error) dispatch.Result {
	code := status.Code(err)
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return dispatch.Result{Outcome: dispatch.Ambiguous, Reason: dispatch.ReasonCancelled,
			Err: fmt.Errorf("call cancelled after it was sent: %w", context.Canceled)}
	case code == codes.DeadlineExceeded || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return dispatch.Result{Outcome: dispatch.Ambiguous, Reason: dispatch.ReasonTimeout,
			Err: fmt.Errorf("no answer from the plugin in time: %w", context.DeadlineExceeded)}
	}
	r := dispatch.Result{Err: fmt.Errorf("plugin call failed: %s", statusText(err))}
	switch code {
	case codes.Unauthenticated, codes.PermissionDenied:
		r.Outcome, r.Reason = dispatch.Auth, dispatch.ReasonAuth
		return r
	case codes.Unimplemented:
		// Answered by the gRPC server before any handler ran.
		r.Outcome, r.NotSent, r.Reason = dispatch.Retry, true, ReasonPluginProtocol
		return r
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.NotFound, codes.AlreadyExists:
		r.Outcome, r.Reason = dispatch.Terminal, ReasonPluginRejected
		return r
	case codes.ResourceExhausted, codes.Aborted:
		r.Outcome, r.Reason = dispatch.Retry, ReasonPluginBusy
		return r
	}
	// Unavailable, Canceled (not by ctx), Unknown, Internal, DataLoss: the
	// process may have died under the call.
	if p.waitExit(ctx, crashGrace) {
		cause := fmt.Errorf("plugin process exited during a call (%s)", p.runner.exitStatus())
		a.retire(p, cause)
		return dispatch.Result{Outcome: dispatch.Ambiguous, Reason: ReasonPluginCrashed, Err: cause}
	}
	if code == codes.Unavailable || code == codes.Canceled {
		if s := p.Conn.GetState(); s != connectivity.Ready {
			a.retire(p, fmt.Errorf("connection to the plugin lost: %s", statusText(err)))
			r.Outcome, r.Reason = dispatch.Ambiguous, ReasonPluginConnection
			return r
		}
		// A live process on a healthy connection said so itself.
		r.Outcome, r.Reason = dispatch.Retry, ReasonPluginBusy
		return r
	}
	r.Outcome, r.Reason = dispatch.Ambiguous, ReasonPluginError
	return r
}

// statusText renders a gRPC error as "Code: message" on one line.
func statusText(err error) string {
	st := status.Convert(err)
	return st.Code().String() + ": " + wire.OneLine(st.Message(), errTextLimit)
}

// millis converts milliseconds to a Duration without overflow.
func millis(ms int64) time.Duration {
	if ms > int64(math.MaxInt64/time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}
