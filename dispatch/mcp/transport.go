package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
)

// The Streamable HTTP transport: request headers, one JSON-RPC call and
// its answer (JSON or an SSE stream), notifications.

func (a *Adapter) headers(req *http.Request, c conn, method, name, key string) {
	for k, v := range a.cfg.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("User-Agent", a.cfg.UserAgent)
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
	}
	if c.proto != "" {
		req.Header.Set("Mcp-Protocol-Version", c.proto)
	}
	if c.stateless && method != "" {
		// The standard headers of 2026-07-28, mirroring the body.
		req.Header.Set("Mcp-Method", method)
		if name != "" {
			req.Header.Set("Mcp-Name", name)
		}
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
}

func (a *Adapter) notify(ctx context.Context, c conn, method string) (dispatch.Result, bool) {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method})
	req, err := dispatch.NewRequest(ctx, http.MethodPost, a.cfg.URL, body)
	if err != nil {
		return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Err: errors.New("mcp: cannot build the request")}, false
	}
	req.Header.Set("Content-Type", "application/json")
	a.headers(req, c, method, "", "")
	var tr dispatch.SendTracker
	req = req.WithContext(tr.Trace(ctx))
	resp, err := a.client.Do(req)
	if err != nil {
		return dispatch.ClassifyTransportError(ctx, err, tr.MaybeSent()), false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return httpResult(resp, nil), false
	}
	return dispatch.Result{}, true
}

// httpResult classifies a non-2xx answer (or a 2xx the caller refuses).
func httpResult(resp *http.Response, body []byte) dispatch.Result {
	out, reason := dispatch.ClassifyHTTP(resp.StatusCode, resp.Header)
	r := dispatch.Result{Outcome: out, Status: resp.StatusCode, Reason: reason}
	if d, ok := dispatch.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
		r.RetryAfter = d
	}
	r.Err = dispatch.NewHTTPError(resp.StatusCode, body, dispatch.ParseProblem(resp.Header.Get("Content-Type"), body))
	return r
}

// lostConn reports whether a refusal says the server no longer knows c: a
// 404 on a session, a 400 whose error names the session (the reference
// servers' "No valid session ID provided" after a restart), or, on the
// stateless revision, a 400 refusing the revision (the server was replaced
// by one that does not offer it). Such a request never reached a tool.
func lostConn(c conn, status int, body []byte) bool {
	switch {
	case c.session != "" && status == http.StatusNotFound:
		return true
	case c.session != "" && status == http.StatusBadRequest:
		return bytes.Contains(bytes.ToLower(body), []byte("session"))
	case c.stateless && status == http.StatusBadRequest:
		var m rpcMessage
		return json.Unmarshal(body, &m) == nil && m.Error != nil && m.Error.Code == codeUnsupportedProtocolVersion
	}
	return false
}

// sessionLostError is the error of a call refused for its session; plain is
// the answer classified as any other.
type sessionLostError struct{ plain dispatch.Result }

func (e *sessionLostError) Error() string {
	return fmt.Sprintf("mcp: the server no longer knows the session (HTTP %d): %v", e.plain.Status, e.plain.Err)
}

// codeUnsupportedProtocolVersion is the JSON-RPC error of a server that
// does not speak the revision a request names.
const codeUnsupportedProtocolVersion = -32022

// call sends one JSON-RPC request on c and reads its answer, from a JSON
// body or an SSE stream. ok is false with r the classified failure.
func (a *Adapter) call(ctx context.Context, c conn, method string, params any, key, name string, hold *answerHold) (msg *rpcMessage, status int, h http.Header, r dispatch.Result, ok bool) {
	id := a.nextID.Add(1)
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		return nil, 0, nil, dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: ReasonBadPayload,
			Err: errors.New("mcp: cannot encode the request")}, false
	}
	req, err := dispatch.NewRequest(ctx, http.MethodPost, a.cfg.URL, body)
	if err != nil {
		return nil, 0, nil, dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Err: errors.New("mcp: cannot build the request")}, false
	}
	req.Header.Set("Content-Type", "application/json")
	a.headers(req, c, method, name, key)
	var tr dispatch.SendTracker
	req = req.WithContext(tr.Trace(ctx))
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, 0, nil, dispatch.ClassifyTransportError(ctx, err, tr.MaybeSent()), false
	}
	defer resp.Body.Close()
	status, h = resp.StatusCode, resp.Header
	if resp.StatusCode/100 != 2 {
		b, _, _ := dispatch.ReadBody(resp.Body, 4096)
		if lostConn(c, resp.StatusCode, b) {
			// Refused before any tool ran; request negotiates again.
			return nil, status, h, dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Status: status,
				Reason: ReasonSessionExpired, Err: &sessionLostError{plain: httpResult(resp, b)}}, false
		}
		r := httpResult(resp, b)
		if method == "initialize" && (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed) {
			r.Reason = ReasonProtocol
			r.Err = fmt.Errorf("%w (is the url an MCP Streamable HTTP endpoint?)", r.Err)
		}
		return nil, status, h, r, false
	}
	ambiguous := func(reason string, err error) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Ambiguous, Status: status, Reason: reason, Err: err}
	}
	ct := strings.ToLower(h.Get("Content-Type"))
	switch {
	case strings.HasPrefix(ct, "text/event-stream"):
		m, err := a.readSSE(hold.reader(ctx, resp.Body), id)
		if err != nil {
			if errors.Is(err, errTooLarge) {
				return nil, status, h, tooLarge(method, status, err), false
			}
			if ctx.Err() != nil || !errors.Is(err, errProtocol) {
				r := dispatch.ClassifyTransportError(ctx, err, true)
				return nil, status, h, r, false
			}
			return nil, status, h, ambiguous(ReasonProtocol, err), false
		}
		return m, status, h, dispatch.Result{}, true
	case strings.HasPrefix(ct, "application/json"):
		b, truncated, err := dispatch.ReadBody(hold.reader(ctx, resp.Body), a.cfg.MessageLimit)
		if err != nil {
			return nil, status, h, dispatch.ClassifyTransportError(ctx, err, true), false
		}
		if truncated {
			return nil, status, h, tooLarge(method, status, fmt.Errorf("mcp: %s answer exceeds %d bytes: %w", method, a.cfg.MessageLimit, errTooLarge)), false
		}
		var m rpcMessage
		if err := json.Unmarshal(b, &m); err != nil || (m.Result == nil && m.Error == nil) {
			return nil, status, h, ambiguous(ReasonProtocol, fmt.Errorf("mcp: %s answer is not a JSON-RPC response", method)), false
		}
		return &m, status, h, dispatch.Result{}, true
	default:
		b, _, _ := dispatch.ReadBody(resp.Body, 200)
		err := fmt.Errorf("mcp: %s answered HTTP %d with content type %q, not JSON-RPC (is the url an MCP Streamable HTTP endpoint?): body %q",
			method, status, wire.OneLine(ct, 40), excerpt(b))
		return nil, status, h, ambiguous(ReasonProtocol, err), false
	}
}

// tooLarge is the result of an answer to method over MessageLimit, not
// read. To a tools/call, the tool may have acted and what it answered is
// unknown: the row parks (Result.Unread). Any other request is refused.
func tooLarge(method string, status int, err error) dispatch.Result {
	if method == methodToolsCall {
		return dispatch.Result{Outcome: dispatch.Ambiguous, Unread: true, Status: status, Reason: ReasonTooLarge, Err: err}
	}
	return dispatch.Result{Outcome: dispatch.Terminal, Status: status, Reason: ReasonTooLarge, Err: err}
}

var (
	errTooLarge = errors.New("message too large")
	errProtocol = errors.New("protocol error")
)

// readSSE reads events until the response to id. Other messages (progress,
// logs, server requests) are skipped. A stream that ends first is an error;
// it is never resumed, so the call is never re-sent.
func (a *Adapter) readSSE(r io.Reader, id int64) (*rpcMessage, error) {
	br := bufio.NewReaderSize(r, 32<<10)
	var data bytes.Buffer
	want := strconv.FormatInt(id, 10)
	for {
		line, err := readLine(br, a.cfg.MessageLimit)
		if err != nil {
			if err == io.EOF {
				return nil, fmt.Errorf("mcp: the event stream ended before the answer: %w", io.ErrUnexpectedEOF)
			}
			return nil, err
		}
		switch {
		case len(line) == 0:
			if data.Len() > 0 {
				var m rpcMessage
				if json.Unmarshal(data.Bytes(), &m) == nil && string(bytes.TrimSpace(m.ID)) == want && m.Method == "" {
					if m.Result == nil && m.Error == nil {
						return nil, fmt.Errorf("mcp: the answer is not a JSON-RPC response: %w", errProtocol)
					}
					return &m, nil
				}
				data.Reset()
			}
		case bytes.HasPrefix(line, []byte("data:")):
			v := bytes.TrimPrefix(line[5:], []byte(" "))
			if data.Len()+len(v) > a.cfg.MessageLimit {
				return nil, fmt.Errorf("mcp: an event exceeds %d bytes: %w", a.cfg.MessageLimit, errTooLarge)
			}
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.Write(v)
		}
	}
}

// readLine reads one line without its end, at most limit bytes.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, isPrefix, err := br.ReadLine()
		if err != nil {
			return nil, err
		}
		line = append(line, chunk...)
		if len(line) > limit {
			return nil, fmt.Errorf("mcp: an event line exceeds %d bytes: %w", limit, errTooLarge)
		}
		if !isPrefix {
			return line, nil
		}
	}
}
