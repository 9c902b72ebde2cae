// Package wire holds what the adapters and the config loader share, so that
// each rule has one implementation: secrets and ${env:…}/${file:…}
// references (secret.go), errors located at a field path (field.go),
// header-name syntax and the headers drainer sets itself (header.go), the
// idempotency key's placement (placement.go), W3C trace context (trace.go)
// and provider text made safe for one log line (text.go).
//
// It is a leaf: it imports only the standard library, and neither package
// config nor any adapter package.
package wire
