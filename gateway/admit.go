package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// batchRefusal answers a JSON-RPC batch. The revisions the gateway serves
// have none; the SDK would take one from a client that names an older
// revision (or none) and run its calls all at once.
const batchRefusal = "drainer gateway: JSON-RPC batches are not supported: it serves MCP revisions 2026-07-28 and 2025-11-25, " +
	"which have none; send each request in a POST of its own. Nothing was recorded or sent"

// codeBusy is the JSON-RPC error code of a call refused because the
// gateway has as many calls in progress as it takes.
const codeBusy = -32000

// admit takes one of the slots for a POST (Config.MaxRequests) before it
// reads its body (at most maxRequestBytes, within the server's
// ReadTimeout), refuses a JSON-RPC batch (400), and holds one of the slots
// for a tools/call until it is answered, or its agent hangs up (the call's
// wait ends then: hungUp): a request or a call that finds
// none free is answered 503 with Retry-After at once, and nothing of it is
// recorded or sent. Every other request goes on as it came.
func (g *Gateway) admit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		select {
		case g.requests <- struct{}{}:
			defer func() { <-g.requests }()
		default:
			g.metrics.calls.WithLabelValues("", string(OutcomeRefused)).Inc()
			g.log.Debug("gateway: a request refused: as many are being read or served as the gateway takes", "max_requests", cap(g.requests))
			w.Header().Set("Retry-After", "1")
			writeRPCError(w, http.StatusServiceUnavailable, nil, codeBusy,
				fmt.Sprintf("drainer gateway: %d requests are in progress, as many as it takes at once; this one was not read, recorded or sent: "+
					"send it again in a moment", cap(g.requests)))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
		if err != nil {
			bodyError(w, err)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if isBatch(body) {
			g.metrics.calls.WithLabelValues("", string(OutcomeRefused)).Inc()
			g.log.Info("gateway: a JSON-RPC batch refused", "bytes", len(body))
			writeRPCError(w, http.StatusBadRequest, nil, jsonrpc.CodeInvalidRequest, batchRefusal)
			return
		}
		method, id, problem := envelope(body)
		if problem != nil {
			g.metrics.calls.WithLabelValues("", string(OutcomeRefused)).Inc()
			writeRPCError(w, http.StatusBadRequest, nil, problem.code, problem.msg)
			return
		}
		rw := &rpcRefusals{ResponseWriter: w, id: id}
		defer rw.finish()
		w = rw
		if method != "tools/call" {
			next.ServeHTTP(w, r)
			return
		}
		if tool, adapter, id, ok := g.awaitedAdapter(body); ok {
			g.metrics.calls.WithLabelValues(tool, string(OutcomeRefused)).Inc()
			g.log.Info("gateway: a call refused: its tool's server has not answered yet", "tool", tool, "adapter", adapter)
			w.Header().Set("Retry-After", "5")
			writeRPCError(w, http.StatusServiceUnavailable, id, codeBusy,
				fmt.Sprintf("drainer gateway: tool %s is routed to the mcp adapter %s, whose server has not answered yet; "+
					"this call was not recorded or sent: call again in a moment", tool, adapter))
			return
		}
		select {
		case g.slots <- struct{}{}:
		default:
			req, ok := toolsCall(body)
			if !ok {
				next.ServeHTTP(w, r) // the SDK refuses it: no call
				return
			}
			tool := g.knownTool(req)
			g.metrics.calls.WithLabelValues(tool, string(OutcomeRefused)).Inc()
			g.log.Debug("gateway: a call refused: as many calls are in progress as the gateway takes", "tool", tool, "max_calls", cap(g.slots))
			w.Header().Set("Retry-After", "1")
			writeRPCError(w, http.StatusServiceUnavailable, req.ID.Raw(), codeBusy,
				fmt.Sprintf("drainer gateway: %d calls are in progress, as many as it takes at once; this call was not recorded or sent: "+
					"call again in a moment", cap(g.slots)))
			return
		}
		defer func() { <-g.slots }()
		// What the answer takes of the answers' budget is given back once
		// the SDK has written it (budget.go).
		ctx, answered := withAnswerHold(context.WithValue(r.Context(), requestKey{}, r.Context()))
		defer answered()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// requestKey holds, in a tools/call's context, the context of its HTTP
// request, which ends when the agent hangs up. The SDK's handler context
// carries the request's values but does not end with it.
type requestKey struct{}

// hungUp is closed once the agent of the call of ctx hung up (nil: never).
func hungUp(ctx context.Context) <-chan struct{} {
	if r, ok := ctx.Value(requestKey{}).(context.Context); ok {
		return r.Done()
	}
	return nil
}

// isBatch reports a body that is a JSON array: its first byte past JSON's
// whitespace is '['.
func isBatch(body []byte) bool {
	b := bytes.TrimLeft(body, " \t\r\n")
	return len(b) > 0 && b[0] == '['
}

// envelopeProblem is why a POST's body is no JSON-RPC message: its error
// code and message.
type envelopeProblem struct {
	code int
	msg  string
}

// envelope reads the method of the JSON-RPC message of a POST's body (""
// for a response), or says why the body is none, as a JSON-RPC error
// rather than the SDK's plain-text refusal (or, for an object that is
// neither a request nor a response, its silent acceptance). A light look
// (the SDK's decoder allocates a large buffer per message, and every
// body is decoded by the SDK after this), made for every POST; toolsCall
// decodes a call as the SDK does only when the call is refused.
func envelope(body []byte) (method string, id json.RawMessage, problem *envelopeProblem) {
	var m struct {
		Method *string         `json:"method"`
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if !json.Valid(body) {
		return "", nil, &envelopeProblem{jsonrpc.CodeParseError, "drainer gateway: the request body is not JSON; nothing was recorded or sent"}
	}
	if err := json.Unmarshal(body, &m); err != nil || bytes.Equal(bytes.TrimSpace(body), []byte("null")) {
		return "", nil, &envelopeProblem{jsonrpc.CodeInvalidRequest, "drainer gateway: the request body is not a JSON-RPC message (a JSON object); nothing was recorded or sent"}
	}
	if m.Method == nil && m.Result == nil && m.Error == nil {
		return "", nil, &envelopeProblem{jsonrpc.CodeInvalidRequest, "drainer gateway: the message has no method (a request or notification) and no result or error (a response); nothing was recorded or sent"}
	}
	if m.Method == nil {
		return "", m.ID, nil
	}
	return *m.Method, m.ID, nil
}

// toolsCall decodes body as the SDK does (one JSON-RPC message) and
// returns it when it is a tools/call; anything else the SDK answers or
// refuses without a tool.
func toolsCall(body []byte) (*jsonrpc.Request, bool) {
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return nil, false
	}
	req, ok := msg.(*jsonrpc.Request)
	return req, ok && req.Method == "tools/call"
}

// knownTool is the name of the tool req calls, when the gateway serves it
// ("" otherwise: a metric label takes only the tools served).
func (g *Gateway) knownTool(req *jsonrpc.Request) string {
	var p struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(req.Params, &p) != nil {
		return ""
	}
	g.mu.RLock()
	_, ok := g.tools[p.Name]
	g.mu.RUnlock()
	if ok || (p.Name == AbortToolName && g.cfg.AbortTool) {
		return p.Name
	}
	return ""
}

// bodyError answers a request whose body could not be read: too large
// (413), not arrived within the read timeout (408), or cut off (400).
func bodyError(w http.ResponseWriter, err error) {
	var tooLarge *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.As(err, &tooLarge):
		http.Error(w, fmt.Sprintf("request body exceeds %d bytes", tooLarge.Limit), http.StatusRequestEntityTooLarge)
	case errors.As(err, &netErr) && netErr.Timeout():
		http.Error(w, "drainer gateway: the request body did not arrive in time", http.StatusRequestTimeout)
	default:
		http.Error(w, "drainer gateway: could not read the request body", http.StatusBadRequest)
	}
}

// writeRPCError answers with HTTP status and a JSON-RPC error (id nil: null).
func writeRPCError(w http.ResponseWriter, status int, id any, code int, msg string) {
	type rpcError struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	b, err := json.Marshal(struct {
		JSONRPC string   `json:"jsonrpc"`
		ID      any      `json:"id"`
		Error   rpcError `json:"error"`
	}{"2.0", id, rpcError{code, msg}})
	if err != nil {
		http.Error(w, msg, status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// drain waits, for a short while, for the calls still in progress once
// Shutdown ended them: each is answered after a last read of its row
// (lastLookTimeout).
func (g *Gateway) drain() {
	deadline := time.Now().Add(drainWait)
	for len(g.slots) > 0 {
		if time.Now().After(deadline) {
			g.log.Warn("gateway: calls still in progress at shutdown", "calls", len(g.slots))
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// drainWait bounds drain.
const drainWait = 5 * time.Second
