// Package sdk is the Go SDK for drainer adapter plugins: executables that
// drainer starts for adapters of type "plugin" and sends outbox rows to, one
// Dispatch call per delivery attempt.
//
// A plugin implements Adapter with drainer's own vocabulary (dispatch.Message
// in, a classified dispatch.Result out) and hands it to Serve from main:
//
//	package main
//
//	import (
//		"context"
//
//		"github.com/drainer-io/drainer/dispatch"
//		"github.com/drainer-io/drainer/dispatch/execplugin/sdk"
//	)
//
//	type sender struct{}
//
//	func (sender) Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result {
//		// Deliver m.Payload, sending m.Key upstream as the idempotency key.
//		if err := deliver(ctx, m.Key, m.Payload); err != nil {
//			return dispatch.Result{Outcome: dispatch.Retry, Reason: "upstream_down", Err: err}
//		}
//		return dispatch.Result{Outcome: dispatch.Success, Response: []byte(`{"ok":true}`)}
//	}
//
//	func main() {
//		sdk.Serve(sender{}, sdk.Info{Name: "my-plugin", Version: "1.0.0"})
//	}
//
// The contract is that of dispatch.Adapter: Dispatch must be safe for
// concurrent use, must send m.Key upstream on every attempt, must honour ctx
// (its deadline is the attempt's), and Result.Err must carry neither a secret
// nor the payload. Result.Reason is a metric label: keep it to a small fixed
// set of lower-case words (letters, digits, underscores; at most 40 bytes).
// An adapter that also implements dispatch.KeyTTLer reports its provider's
// idempotency window (0 = unlimited), used when the config sets no key_ttl.
//
// A panic in Dispatch is recovered and answered as dispatch.Ambiguous: the
// effect may have happened. Anything else that ends the process during a call
// (os.Exit, a crash) is seen by drainer as ambiguous too, and drainer starts
// the plugin again for the next attempt.
//
// The plugin's standard output and standard error are forwarded to drainer's
// log at debug and info level; Logger returns a structured logger whose lines
// drainer logs at their own level. Configuration comes from the command line
// (the adapter's args) or from DRAINER_PLUGIN_* environment variables: drainer
// passes no other variable of its own environment but a few harmless ones
// (PATH, HOME, TMPDIR, TZ, locale, proxy and CA settings).
//
// Plugins written in other languages implement the gRPC service of
// dispatch/execplugin/proto/adapter.proto behind go-plugin's handshake.
//
// # Files
//
//	sdk.go  Adapter, Info, Serve, Logger; the gRPC server: request to Message,
//	        Result to answer, a panic answered ambiguous
package sdk
