// Package webhook is the "http" adapter: it delivers each outbox row as a POST
// of the row's payload to a configured URL, with the row's idempotency key in
// the Idempotency-Key header, and classifies the answer as docs/reference.md §5 says
// (dispatch.ClassifyHTTP).
//
// A route may give its tool a method (POST, PUT, PATCH, DELETE), a path
// appended to the URL and fixed query parameters (route.go, Route): the
// path's {tool_name} and {field} variables are filled with url.PathEscape,
// so a value never leaves its segment; a payload that cannot fill them is
// Terminal, NotSent, reason dispatch.ReasonUnsendable, naming the field.
// POST, PUT and PATCH send the payload as the body; DELETE sends none.
//
// The URL, method and headers come only from the configuration, never from
// the payload; {tool_name} is the one template variable of the URL. Redirects
// are never followed. Errors returned in Result.Err name the provider's answer
// (status, problem details, a short excerpt of its body) but never a header
// value, the URL's query or the payload.
package webhook
