package config

import (
	"github.com/drainer-io/drainer/dispatch/wire"
)

// Secret is a value that must not be printed: it comes from ${env:X} or
// ${file:/path} and is revealed only on the wire (wire.Secret).
type Secret = wire.Secret

// errInlineSecret is the message for a secret written in the config text.
const errInlineSecret = wire.ErrInlineSecret

// The reference rules live in package wire, shared with the adapters.
var (
	hasReference    = wire.HasReference
	literalPassword = wire.LiteralPassword
)
