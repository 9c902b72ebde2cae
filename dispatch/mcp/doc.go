// Package mcp is the `type: mcp` adapter (CONTRACT §5): it speaks the Model
// Context Protocol (revision 2025-06-18 or later) over Streamable HTTP, keeps
// one session per adapter, and sends each row as one tools/call whose _meta
// and Idempotency-Key header carry the row's key.
//
// The client side is written on net/http rather than the SDK's client so
// that every HTTP status, Retry-After and connection failure of the one POST
// that carries a call is classified exactly, and so that nothing re-sends
// that POST: requests come from dispatch.NewRequest (no transport re-send),
// an SSE answer is never resumed, and an expired session is reported to the
// engine (Retry, not sent) instead of being re-initialised and re-sent within
// the attempt. The SDK builds the test servers.
//
// At startup CheckRoutes reads tools/list: a missing tool is an error, a
// class that contradicts the tool's annotations a warning.
package mcp
