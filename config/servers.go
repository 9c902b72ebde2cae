package config

import (
	"fmt"
	"net"
)

// The servers drainer run opens besides its metrics: the operator console
// and the MCP gateway, and what their addresses may be.

// console checks the operator console: actions need a token, and the token
// comes from a reference.
func (v *validator) console() {
	c := v.cfg.Console
	if p := "console.token"; v.set(p) && !hasReference(v.src[p].raw) {
		v.errorf(p, errInlineSecret)
	}
	if p := "console.actions"; v.usable(p) && c.Actions && !v.set("console.token") {
		v.errorf(p, "actions need console.token (from ${env:NAME} or ${file:/path})")
	}
	if p := "console.addr"; v.usable(p) && c.Addr != "" {
		if w := ConsoleExposure(c.Addr); w != "" {
			v.warnf(p, "%s", w)
		}
	}
}

// ConsoleExposure says what an address off loopback exposes (""
// on loopback): the console's pages and API read rows (payloads, responses,
// audit trails) with no token; only actions need one. `check`, `run` and
// --console-addr apply this one rule.
func ConsoleExposure(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "localhost" {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return ""
	}
	return fmt.Sprintf("%q is not a loopback address: whoever reaches it reads every row's payload, response and audit trail (reads need no token; only actions do): keep the console on loopback, or behind a proxy that authenticates", addr)
}

// gateway checks the MCP gateway: its token comes from a reference, and an
// address off loopback needs one (the gateway sends calls with the tool
// servers' credentials).
func (v *validator) gateway() {
	g := v.cfg.Gateway
	if p := "gateway.token"; v.set(p) && !hasReference(v.src[p].raw) {
		v.errorf(p, errInlineSecret)
	}
	v.positive("gateway.wait", g.Wait)
	if p := "gateway.addr"; v.usable(p) && g.Addr != "" {
		if err := RequireGatewayToken(g.Addr, v.set("gateway.token")); err != nil {
			v.errorf(p, "%s", err.Error())
		}
	}
	if p := "gateway.addr"; v.usable(p) && g.Addr != "" && v.cfg.Databases != nil {
		v.errorf(p, "the gateway records calls in one database: it cannot be used with databases:")
	}
	if p := "gateway.addr"; v.usable(p) && g.Addr != "" && !v.routesMCP() {
		v.warnf(p, "no route sends to an adapter of type mcp: the gateway would serve no tool (drainer_abort_run only, with abort_tool: true)")
	}
}

// routesMCP reports whether a route sends to an adapter of type mcp: the
// tools the gateway serves.
func (v *validator) routesMCP() bool {
	for _, r := range v.cfg.Routes {
		if a := v.cfg.Adapters[r.Adapter]; a != nil && a.Type == "mcp" {
			return true
		}
	}
	return false
}

// RequireGatewayToken refuses a gateway address off loopback without a
// token: the gateway records calls and sends them with the tool servers'
// credentials. `check`, `run` and --gateway-addr apply this one rule.
func RequireGatewayToken(addr string, hasToken bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", addr, err)
	}
	if hasToken || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%q is not a loopback address: set gateway.token (from ${env:NAME} or ${file:/path}); every request must then carry it as a bearer token", addr)
}
