package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/drainer-io/drainer/idemkey"
)

// The _meta fields and the header that identify a call (docs/reference.md §13).
const (
	MetaAgentRunID    = "io.drainer/agent_run_id"
	MetaStepID        = "io.drainer/step_id"
	MetaBusinessScope = "io.drainer/business_scope"
	HeaderAgentRunID  = "X-Agent-Run-Id"
	// Answers: the call's key, whether it replays an earlier answer, the
	// row's status (on a timeout).
	MetaKey    = "io.drainer/key"
	MetaReplay = "io.drainer/replay"
	MetaStatus = "io.drainer/status"
	// MetaTraceparent is the W3C trace context of the call, carried into its row.
	MetaTraceparent = "traceparent"
	// AutoStepPrefix starts a step id the gateway derived from the call.
	AutoStepPrefix = "auto-"
)

// errNoRun is the answer to a call that names no run.
var errNoRun = fmt.Errorf("tools/call names no run: set _meta[%q] or the %s header", MetaAgentRunID, HeaderAgentRunID)

// identify returns the four-tuple of a call of tool with args (a JSON
// object) and meta, and its payload: the arguments as the agent sent them
// (compacted; {} when absent), numbers as written. agent_run_id from meta,
// else the X-Agent-Run-Id header; step_id from meta, else AutoStepID;
// business_scope from meta, else empty. An empty string in meta counts as
// absent for agent_run_id and step_id.
func identify(tool string, args json.RawMessage, meta map[string]any, h http.Header) (idemkey.Tuple, []byte, error) {
	payload, canon, err := callArgs(args)
	if err != nil {
		return idemkey.Tuple{}, nil, err
	}
	t := idemkey.Tuple{ToolName: tool}
	if t.AgentRunID, err = runID(meta, h); err != nil {
		return t, nil, err
	}
	if t.AgentRunID == "" {
		return t, nil, errNoRun
	}
	var ok bool
	if t.StepID, ok, err = metaString(meta, MetaStepID); err != nil {
		return t, nil, err
	} else if !ok || t.StepID == "" {
		t.StepID = AutoStepID(tool, canon)
	}
	if t.BusinessScope, _, err = metaString(meta, MetaBusinessScope); err != nil {
		return t, nil, err
	}
	if err := t.Validate(); err != nil {
		return t, nil, err
	}
	return t, payload, nil
}

// runID is the run a call names: _meta[MetaAgentRunID] when it is set and
// not empty, else the X-Agent-Run-Id header ("" when neither names one).
func runID(meta map[string]any, h http.Header) (string, error) {
	run, _, err := metaString(meta, MetaAgentRunID)
	if err != nil {
		return "", err
	}
	if run == "" {
		run = h.Get(HeaderAgentRunID)
	}
	return run, nil
}

// AutoStepID is the step id of a call that names none: "auto-" and the
// first 16 hex digits of sha256(tool, 0x00, the canonical form of the
// arguments: StepForm). A harness that sends the same call again, under
// any request id, derives the same step; an agent that means a second
// identical call names its own step_id.
func AutoStepID(tool string, canonicalArgs []byte) string {
	h := sha256.New()
	h.Write([]byte(tool))
	h.Write([]byte{0})
	h.Write(canonicalArgs)
	return AutoStepPrefix + hex.EncodeToString(h.Sum(nil))[:16]
}

// callArgs returns a call's arguments, which must be a JSON object
// (absent: {}): as sent, compacted (the payload: its numbers as written),
// and in their canonical form (StepForm).
func callArgs(args json.RawMessage) (payload, canon []byte, err error) {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return []byte("{}"), []byte("{}"), nil
	}
	if trimmed[0] != '{' {
		return nil, nil, errors.New("tools/call arguments must be a JSON object")
	}
	canon, err = StepForm(trimmed)
	if err != nil {
		return nil, nil, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, trimmed); err != nil {
		return nil, nil, fmt.Errorf("tools/call arguments are not JSON: %v", err)
	}
	return buf.Bytes(), canon, nil
}

// metaString reads a string field of _meta: ok is false when absent; a
// field of another type is an error naming it.
func metaString(meta map[string]any, field string) (string, bool, error) {
	v, ok := meta[field]
	if !ok || v == nil {
		return "", false, nil
	}
	s, isString := v.(string)
	if !isString {
		return "", false, fmt.Errorf("_meta[%q] must be a string", field)
	}
	return s, true, nil
}
