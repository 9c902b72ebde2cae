package mcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/drainer-io/drainer/dispatch"
)

// Answers: JSON-RPC messages and errors, and a tools/call result turned
// into a dispatch.Result.

// rpcMessage is one JSON-RPC message from the server.
type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *RPCError       `json:"error"`
}

// RPCError is a JSON-RPC error answer. Its Error text holds the server's
// message, cut short, never the request.
type RPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *RPCError) Error() string {
	msg := e.Message
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return fmt.Sprintf("mcp: JSON-RPC error %d: %s", e.Code, strings.ToValidUTF8(msg, "\uFFFD"))
}

func rpcErrorResult(status int, e *RPCError) dispatch.Result {
	if e.Code == -32700 || (e.Code >= -32602 && e.Code <= -32600) {
		return dispatch.Result{Outcome: dispatch.Terminal, Status: status, Reason: ReasonInvalidRequest, Err: e}
	}
	// Any other error (internal, server-defined) may follow a partial effect.
	return dispatch.Result{Outcome: dispatch.Ambiguous, Status: status, Reason: ReasonRPCError, Err: e}
}

// toolResult classifies a CallToolResult.
func (a *Adapter) toolResult(status int, h http.Header, raw json.RawMessage) dispatch.Result {
	var res struct {
		Content           json.RawMessage `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		IsError           bool            `json:"isError"`
		Meta              struct {
			Replay bool `json:"io.drainer/replay"`
		} `json:"_meta"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return dispatch.Result{Outcome: dispatch.Ambiguous, Status: status, Reason: ReasonProtocol,
			Err: errors.New("mcp: tools/call result is not a CallToolResult object")}
	}
	var resp json.RawMessage
	if len(res.StructuredContent) > 0 && string(res.StructuredContent) != "null" {
		resp = dispatch.ResponseJSON("application/json", res.StructuredContent, a.cfg.ResponseLimit)
	} else {
		content := res.Content
		if len(content) == 0 || string(content) == "null" {
			content = json.RawMessage("[]")
		}
		body := append(append([]byte(`{"content":`), content...), '}')
		resp = dispatch.ResponseJSON("application/json", body, a.cfg.ResponseLimit)
	}
	rec := Record(res.Content, res.StructuredContent, res.IsError, 0) // limited by Dispatch
	if res.IsError {
		return dispatch.Result{Outcome: dispatch.Terminal, Status: status, Reason: ReasonToolError,
			Response: resp, Record: rec, Err: errors.New("mcp: the tool answered isError: true: " + excerpt(resp))}
	}
	if res.Meta.Replay {
		return dispatch.Result{Outcome: dispatch.Replay, Status: status, Reason: dispatch.ReasonReplay, Response: resp, Record: rec}
	}
	return dispatch.Result{Outcome: dispatch.Success, Status: status, Reason: dispatch.ReasonHTTP2xx, Response: resp, Record: rec}
}

// MetaTooLarge, in a record, says the tool's result was larger than the
// record limit and was not kept: its value is the result's size in bytes.
const MetaTooLarge = "io.drainer/too_large"

// Record returns the record of a tool result as the gateway replays it:
// {"content": …, "structuredContent": …, "isError": …}, each field exactly
// as the server sent it (content [] when absent, structuredContent only
// when present). A record longer than limit bytes is replaced by
// {"io.drainer/too_large": <its size>}.
func Record(content, structured json.RawMessage, isError bool, limit int) json.RawMessage {
	if len(content) == 0 || string(content) == "null" {
		content = json.RawMessage("[]")
	}
	b := make([]byte, 0, len(content)+len(structured)+64)
	b = append(b, `{"content":`...)
	b = append(b, content...)
	if len(structured) > 0 && string(structured) != "null" {
		b = append(b, `,"structuredContent":`...)
		b = append(b, structured...)
	}
	if isError {
		b = append(b, `,"isError":true}`...)
	} else {
		b = append(b, `,"isError":false}`...)
	}
	if limit > 0 && len(b) > limit {
		return json.RawMessage(fmt.Sprintf(`{%q:%d}`, MetaTooLarge, len(b)))
	}
	return b
}

// excerpt returns the start of a stored response, on one line.
func excerpt(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = strings.ToValidUTF8(s[:200], "") + "…"
	}
	return s
}
