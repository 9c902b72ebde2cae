package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
)

// The session: initialize and its version negotiation (or server/discover
// for a stateless server), re-established when the server loses it.

// ensure returns the connection to use, negotiating one when there is none.
// A failure is a Retry that never sent the tool call (NotSent), or Auth.
func (a *Adapter) ensure(ctx context.Context) (conn, dispatch.Result, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ready {
		return a.cur, dispatch.Result{}, true
	}
	if r, ok := a.initLocked(ctx); !ok {
		if r.Outcome != dispatch.Auth {
			r.Outcome = dispatch.Retry
		}
		r.NotSent = true
		if r.Reason == "" || r.Reason == dispatch.ReasonConnection || r.Reason == dispatch.ReasonTimeout {
			r.Reason = ReasonInit
		}
		return conn{}, r, false
	}
	return a.cur, dispatch.Result{}, true
}

// Init negotiates now (startup); its error names what is wrong.
func (a *Adapter) Init(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ready {
		return nil
	}
	if r, ok := a.initLocked(ctx); !ok {
		return startupError(r)
	}
	return nil
}

// Negotiated returns the protocol revision in use and whether it is the
// stateless one; "" before the first negotiation.
func (a *Adapter) Negotiated() (revision string, stateless bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cur.proto, a.cur.stateless
}

// startupError is the error of a failed startup call: marked
// dispatch.ErrUnavailable when the server could not be reached or answered
// a transient failure (connection, timeout, 408, 429, 5xx), so the daemon
// does not treat the config as wrong.
func startupError(r dispatch.Result) error {
	if transient(r) {
		return dispatch.MarkUnavailable(r.Err)
	}
	return r.Err
}

// transient reports whether r says the server is not reachable (yet), as
// opposed to reachable and not what the config says.
func transient(r dispatch.Result) bool {
	switch {
	case r.Reason == dispatch.ReasonConnect, r.Reason == dispatch.ReasonConnection, r.Reason == dispatch.ReasonTimeout,
		r.Status == http.StatusRequestTimeout, r.Status == http.StatusTooManyRequests, r.Status >= 500:
		return true
	}
	return false
}

// initLocked negotiates the newest revision both sides speak: server/discover
// for the stateless 2026-07-28 first, then the initialize handshake of the
// session-based revisions. It sets a.cur.
func (a *Adapter) initLocked(ctx context.Context) (dispatch.Result, bool) {
	if r, ok, decided := a.discoverLocked(ctx); decided {
		return r, ok
	}
	params := map[string]any{
		"protocolVersion": Revision20251125,
		"capabilities":    map[string]any{},
		"clientInfo":      a.clientInfo(),
	}
	msg, status, h, r, ok := a.call(ctx, conn{}, "initialize", params, "", "", nil)
	if !ok {
		r.Err = fmt.Errorf("mcp initialize: %w", r.Err)
		return r, false
	}
	if msg.Error != nil {
		return dispatch.Result{Outcome: dispatch.Retry, Status: status, Reason: ReasonInit,
			Err: fmt.Errorf("mcp initialize: %w", msg.Error)}, false
	}
	var res struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if err := json.Unmarshal(msg.Result, &res); err != nil || res.ProtocolVersion == "" {
		return dispatch.Result{Outcome: dispatch.Retry, Status: status, Reason: ReasonProtocol,
			Err: errors.New("mcp initialize: the answer carries no protocolVersion: not an MCP server?")}, false
	}
	if res.ProtocolVersion != Revision20250618 && res.ProtocolVersion != Revision20251125 {
		return dispatch.Result{Outcome: dispatch.Retry, Status: status, Reason: ReasonProtocol,
			Err: fmt.Errorf("mcp initialize: the server speaks MCP protocol revision %q; drainer speaks %s",
				wire.OneLine(res.ProtocolVersion, 40), strings.Join(ProtocolVersions, ", "))}, false
	}
	c := conn{session: h.Get("Mcp-Session-Id"), proto: res.ProtocolVersion}
	// notifications/initialized: a notification, answered 202.
	if r, ok := a.notify(ctx, c, "notifications/initialized"); !ok {
		r.Err = fmt.Errorf("mcp notifications/initialized: %w", r.Err)
		return r, false
	}
	a.cur, a.ready = c, true
	return dispatch.Result{}, true
}

// discoverLocked asks for the stateless revision with server/discover.
// decided is false when the server does not offer it (any refusal that is
// not transient or auth): the caller falls back to initialize.
func (a *Adapter) discoverLocked(ctx context.Context) (_ dispatch.Result, ok, decided bool) {
	c := conn{proto: Revision20260728, stateless: true}
	msg, _, _, r, ok := a.call(ctx, c, "server/discover", map[string]any{"_meta": a.meta(c, nil)}, "", "", nil)
	if !ok {
		if r.Outcome == dispatch.Auth || transient(r) {
			r.Err = fmt.Errorf("mcp server/discover: %w", r.Err)
			return r, false, true
		}
		return dispatch.Result{}, false, false
	}
	if msg.Error != nil {
		return dispatch.Result{}, false, false
	}
	var res struct {
		SupportedVersions []string `json:"supportedVersions"`
	}
	if json.Unmarshal(msg.Result, &res) != nil || !slices.Contains(res.SupportedVersions, Revision20260728) {
		return dispatch.Result{}, false, false
	}
	a.cur, a.ready = c, true
	return dispatch.Result{}, true, true
}

// expire forgets connection c if it is still the current one, so that the
// next request negotiates again.
func (a *Adapter) expire(c conn) {
	a.mu.Lock()
	if a.ready && a.cur == c {
		a.ready, a.cur = false, conn{}
	}
	a.mu.Unlock()
}
