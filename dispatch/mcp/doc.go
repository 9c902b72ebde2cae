// Package mcp is the `type: mcp` adapter (docs/reference.md §5): it speaks
// the Model Context Protocol over Streamable HTTP and sends each row as one
// tools/call whose _meta (key, tuple, traceparent) and Idempotency-Key header
// carry the row's key.
//
// Negotiation takes the newest revision the server offers: server/discover
// for the stateless 2026-07-28 (no initialize, no session; the revision and
// the client's identity travel in every request's _meta), else initialize
// for 2025-11-25 or 2025-06-18 and one session per adapter. A session the
// server no longer knows (404, or a 400 naming the session, as the reference
// servers answer after a restart) is re-established and the call sent again
// with the same key within the same attempt: the refused call never reached
// the tool.
//
// The client side is written on net/http rather than the SDK's client so
// that every HTTP status, Retry-After and connection failure of the one POST
// that carries a call is classified exactly, and so that nothing else
// re-sends that POST: requests come from dispatch.NewRequest (no transport
// re-send) and an SSE answer is never resumed. The SDK builds the test
// servers; its client's negotiation (server/discover first, the _meta
// fields and Mcp-Method/Mcp-Name headers of 2026-07-28) is the model.
//
// Files:
//
//	settings.go Settings: the config keys (url, headers) and their rules; the
//	            type's registration (dispatch.RegisterKind) and its build
//	config.go   Config: url, headers, timeouts, limits, client identity
//	mcp.go      Adapter: New, Close, Dispatch (one tools/call and its _meta)
//	session.go  negotiation, sessions and their recovery
//	transport.go the HTTP transport: headers, one call, SSE answers
//	result.go   answers: JSON-RPC errors, tool results
//	budget.go   large answers read a few at a time (AnswerBudget)
//	oversized.go the latest results too large to record, kept briefly for the gateway
//	tools.go    ListTools, CheckRoutes: tools/list at startup, class vs annotations
//	start.go    StartInBackground: a server unreachable at startup, its rows held (not sent)
//
// At startup CheckRoutes reads tools/list: a missing tool is an error, a
// class that contradicts the tool's annotations a warning. When the server
// cannot be reached yet, the adapter is built anyway and StartInBackground
// keeps connecting; until it is through, Dispatch answers Retry, NotSent
// (ReasonNotReady), which the engine turns into a wait without an attempt.
package mcp
