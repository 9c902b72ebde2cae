package idemkey

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Prefix marks keys of the first (and current) key scheme.
const Prefix = "idem_v1_"

// MaxFieldBytes is the largest accepted size of one tuple field, in bytes.
const MaxFieldBytes = 1024

// Tuple identifies one intent of an agent run.
type Tuple struct {
	AgentRunID    string `json:"agent_run_id"`
	StepID        string `json:"step_id"`
	ToolName      string `json:"tool_name"`
	BusinessScope string `json:"business_scope"`
}

// Canonical returns the canonical JSON bytes of t that the key hashes.
func (t Tuple) Canonical() []byte {
	var b strings.Builder
	b.Grow(64 + len(t.AgentRunID) + len(t.StepID) + len(t.ToolName) + len(t.BusinessScope))
	b.WriteString(`{"agent_run_id":`)
	writeJCSString(&b, t.AgentRunID)
	b.WriteString(`,"business_scope":`)
	writeJCSString(&b, t.BusinessScope)
	b.WriteString(`,"step_id":`)
	writeJCSString(&b, t.StepID)
	b.WriteString(`,"tool_name":`)
	writeJCSString(&b, t.ToolName)
	b.WriteByte('}')
	return []byte(b.String())
}

// Key returns the idempotency key of t. It accepts any strings; use Validate to
// enforce the enqueue rules.
func (t Tuple) Key() string {
	sum := sha256.Sum256(t.Canonical())
	return Prefix + hex.EncodeToString(sum[:16])
}

// Encoded returns the canonical form as unpadded base64url, the value of the
// X-Agent-Idempotency-Tuple header, so a provider can recompute the key.
func (t Tuple) Encoded() string {
	return base64.RawURLEncoding.EncodeToString(t.Canonical())
}

// Validate applies the enqueue rules: agent_run_id, step_id and tool_name are
// non-empty; every field is valid UTF-8, has no NUL byte and is at most
// MaxFieldBytes long; business_scope may be empty. All problems are reported.
func (t Tuple) Validate() error {
	var errs []string
	check := func(name, v string, required bool) {
		switch {
		case required && v == "":
			errs = append(errs, name+" must not be empty")
		case !utf8.ValidString(v):
			errs = append(errs, name+" is not valid UTF-8")
		case strings.IndexByte(v, 0) >= 0:
			errs = append(errs, name+" contains a NUL byte")
		case len(v) > MaxFieldBytes:
			errs = append(errs, fmt.Sprintf("%s is %d bytes, more than the limit of %d", name, len(v), MaxFieldBytes))
		}
	}
	check("agent_run_id", t.AgentRunID, true)
	check("step_id", t.StepID, true)
	check("tool_name", t.ToolName, true)
	check("business_scope", t.BusinessScope, false)
	if len(errs) > 0 {
		return fmt.Errorf("invalid intent tuple: %s", strings.Join(errs, "; "))
	}
	return nil
}

const hexDigits = "0123456789abcdef"

// writeJCSString writes s as a JSON string the way RFC 8785 does: only '"',
// '\\' and control characters below U+0020 are escaped; everything else,
// including U+007F, U+2028 and non-ASCII, is written as raw UTF-8.
func writeJCSString(b *strings.Builder, s string) {
	b.WriteByte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b.WriteString(s[start:i])
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteString(`\u00`)
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		}
		start = i + 1
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
}
