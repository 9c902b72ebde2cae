package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// rpcRefusals turns the SDK's plain-text refusals of a message (HTTP 400,
// text/plain: a jsonrpc version other than 2.0, an id that is neither a
// string nor a number, a method it does not serve, a request without its
// params) into JSON-RPC errors with the message's id, as the gateway's own
// refusals are: an MCP client reads a JSON-RPC error, not a text body.
// Every other answer, streamed or not, passes through as written.
type rpcRefusals struct {
	http.ResponseWriter
	id      json.RawMessage
	refused bool
	text    bytes.Buffer
}

func (w *rpcRefusals) WriteHeader(status int) {
	if status == http.StatusBadRequest && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.refused = true
		return
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *rpcRefusals) Write(b []byte) (int, error) {
	if w.refused {
		if w.text.Len() < 4096 {
			w.text.Write(b)
		}
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Flush keeps a streamed answer (server-sent events) flowing.
func (w *rpcRefusals) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && !w.refused {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *rpcRefusals) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes the JSON-RPC error of a refusal the SDK wrote as text.
func (w *rpcRefusals) finish() {
	if !w.refused {
		return
	}
	msg := strings.TrimSpace(w.text.String())
	code := jsonrpc.CodeInvalidRequest
	if strings.HasPrefix(msg, "JSON RPC not handled") {
		code = codeMethodNotFound
	}
	w.Header().Del("Content-Length")
	w.Header().Del("X-Content-Type-Options")
	var id any
	if requestID(w.id) {
		id = w.id
	}
	writeRPCError(w.ResponseWriter, http.StatusBadRequest, id, code, "drainer gateway: "+msg+"; nothing was recorded or sent")
}

// codeMethodNotFound is JSON-RPC's error code for a method not served.
const codeMethodNotFound = -32601

// requestID reports whether raw is an id a JSON-RPC answer may repeat: a
// string or a number.
func requestID(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && (raw[0] == '"' || raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'))
}
