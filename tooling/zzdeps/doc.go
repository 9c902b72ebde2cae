// Package zzdeps blank-imports modules pinned in go.mod together with it:
// the MCP Go SDK (used by the mcp adapter's tests), kin-openapi (package
// openapiroutes), toxiproxy and its client (the chaos tests, tag integration).
// An ordinary package of the module thus imports each of them, whatever else
// does (nothing else imports toxiproxy's client): go mod tidy keeps them and
// go build ./... builds them. Nothing imports zzdeps.
//
// # Files
//
//	d.go  the blank imports
package zzdeps
