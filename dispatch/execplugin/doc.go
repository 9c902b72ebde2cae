// Package execplugin is the "plugin" adapter: it delivers outbox rows through
// an external executable, a plugin, which drainer starts and talks to over
// gRPC with hashicorp/go-plugin (automatic mTLS, a handshake cookie unique to
// drainer). Plugins are written with the sdk subpackage, or in any language
// from proto/adapter.proto.
//
// # Trust and the checksum
//
// When Config.SHA256 is set, the executable's SHA-256 is checked before every
// start, restarts included, with go-plugin's SecureConfig as Vault's plugin
// catalog does; a mismatch refuses to run it (ErrChecksumMismatch). As with
// Vault, the file must not be writable by anyone who may not run code as
// drainer: the check and the exec are two steps.
//
// The plugin gets no stdin and not drainer's environment (which holds the
// database URL): only PATH, HOME, USER, TMPDIR, TZ, locale, proxy and CA
// settings and the variables whose name starts with DRAINER_PLUGIN_, plus
// go-plugin's own. Its standard error is logged (see New).
//
// # Failures
//
// A plugin that crashes never takes drainer down. Each Dispatch is one gRPC
// call on the running process, bounded by Config.Timeout and the caller's
// context (cancellation propagates to the plugin):
//
//   - the plugin answered: its DispatchResponse is the Result (a missing or
//     unknown outcome is Ambiguous, as the engine treats a zero Outcome);
//   - no answer in time: Ambiguous, dispatch.ReasonTimeout;
//   - the process exited or the connection broke during the call: Ambiguous,
//     ReasonPluginCrashed or ReasonPluginConnection: the plugin may have acted;
//   - the process is not running and cannot be (re)started: Retry with
//     NotSent, ReasonPluginUnavailable: the call never reached a plugin.
//
// A process found dead is started again by the next Dispatch, checksum
// verified again. The first restart after a crash is immediate; consecutive
// crashes or failed starts back off from 100ms doubling to 30s, during which
// Dispatch answers Retry with NotSent and RetryAfter set to the rest of the
// wait; a successful call resets the backoff.
//
// # Key TTL
//
// Adapter implements dispatch.KeyTTLer by asking the plugin. A plugin that
// does not report one makes KeyTTL return ErrKeyTTLNotReported: the caller
// then uses the adapter type's default. A reported 0 means unlimited.
package execplugin
