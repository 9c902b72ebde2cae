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
	"github.com/gowebpki/jcs"
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
// object) and meta, and its canonical arguments: agent_run_id from meta,
// else the X-Agent-Run-Id header; step_id from meta, else AutoStepID;
// business_scope from meta, else empty.
func identify(tool string, args json.RawMessage, meta map[string]any, h http.Header) (idemkey.Tuple, []byte, error) {
	canon, err := canonicalArgs(args)
	if err != nil {
		return idemkey.Tuple{}, nil, err
	}
	t := idemkey.Tuple{ToolName: tool}
	var ok bool
	if t.AgentRunID, ok, err = metaString(meta, MetaAgentRunID); err != nil {
		return t, nil, err
	} else if !ok {
		t.AgentRunID = h.Get(HeaderAgentRunID)
	}
	if t.AgentRunID == "" {
		return t, nil, errNoRun
	}
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
	return t, canon, nil
}

// AutoStepID is the step id of a call that names none: "auto-" and the
// first 16 hex digits of sha256(tool, 0x00, the RFC 8785 canonical JSON of
// the arguments). A harness that sends the same call again, under any
// request id, derives the same step; an agent that means a second identical
// call names its own step_id.
func AutoStepID(tool string, canonicalArgs []byte) string {
	h := sha256.New()
	h.Write([]byte(tool))
	h.Write([]byte{0})
	h.Write(canonicalArgs)
	return AutoStepPrefix + hex.EncodeToString(h.Sum(nil))[:16]
}

// canonicalArgs returns the RFC 8785 form of a call's arguments, which must
// be a JSON object (absent: {}).
func canonicalArgs(args json.RawMessage) ([]byte, error) {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return []byte("{}"), nil
	}
	if trimmed[0] != '{' {
		return nil, errors.New("tools/call arguments must be a JSON object")
	}
	canon, err := jcs.Transform(trimmed)
	if err != nil {
		return nil, fmt.Errorf("tools/call arguments are not canonical JSON: %v", err)
	}
	return canon, nil
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
