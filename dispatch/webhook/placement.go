package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Key locations of a KeyPlacement (docs/reference.md §5).
const (
	LocationHeader = "header"
	LocationQuery  = "query"
	LocationBody   = "body"
)

// DefaultKeyHeader is the header that carries the key by default.
const DefaultKeyHeader = "Idempotency-Key"

// KeyPlacement says where the idempotency key travels: header Name, query
// parameter Name, or top-level field Name of the JSON-object payload. The zero
// value means the default, header Idempotency-Key.
type KeyPlacement struct {
	Name     string
	Location string
}

// IsZero reports whether p is unset.
func (p KeyPlacement) IsZero() bool { return p == KeyPlacement{} }

// withDefaults fills an unset placement with the default header, and an
// unset location with header.
func (p KeyPlacement) withDefaults() KeyPlacement {
	if p.IsZero() {
		return KeyPlacement{Name: DefaultKeyHeader, Location: LocationHeader}
	}
	if p.Location == "" {
		p.Location = LocationHeader
	}
	return p
}

// String is "location name", for messages.
func (p KeyPlacement) String() string { return p.Location + " " + p.Name }

// validatePlacement checks one placement against the adapter's URL template
// and configured headers. Its errors quote the placement's name (a config
// identifier), never a URL or a header value.
func validatePlacement(p KeyPlacement, urlTmpl string, headers map[string]string) error {
	p = p.withDefaults()
	switch p.Location {
	case LocationHeader:
		switch {
		case !isToken(p.Name):
			return fmt.Errorf("name %q is not a valid header name", p.Name)
		case !strings.EqualFold(p.Name, DefaultKeyHeader) &&
			slices.ContainsFunc(reservedHeaders, func(r string) bool { return strings.EqualFold(r, p.Name) }):
			return fmt.Errorf("header %s is set by the adapter and cannot carry the key", p.Name)
		case strings.EqualFold(p.Name, "User-Agent") || strings.EqualFold(p.Name, "Traceparent"):
			return fmt.Errorf("header %s is set by the adapter and cannot carry the key", p.Name)
		}
		for name := range headers {
			// A configured reserved header is reported by Validate already.
			if strings.EqualFold(name, p.Name) && !strings.EqualFold(name, DefaultKeyHeader) {
				return fmt.Errorf("header %s is also configured in headers", p.Name)
			}
		}
	case LocationQuery:
		if p.Name == "" {
			return errors.New("name is required")
		}
		if u, err := url.Parse(strings.ReplaceAll(urlTmpl, toolNameVar, "x")); err == nil && u.Query().Has(p.Name) {
			return fmt.Errorf("query parameter %q is already in the url", p.Name)
		}
	case LocationBody:
		if p.Name == "" {
			return errors.New("name is required")
		}
	default:
		return fmt.Errorf("location must be header, query or body, got %q", p.Location)
	}
	return nil
}

// placementFor returns the placement of tool: its override, else the adapter's.
func (c Config) placementFor(tool string) KeyPlacement {
	if p, ok := c.ToolKeyPlacement[tool]; ok {
		return p.withDefaults()
	}
	return c.KeyPlacement.withDefaults()
}

// errPayloadNotObject and errFieldConflict are terminal: the same payload
// fails the same way on every attempt. Neither quotes the payload.
var errPayloadNotObject = errors.New("payload is not a JSON object")

// withKeyField returns payload with the top-level field name set to key. A
// payload that already has the field with the same string value is sent as
// is; with another value it is refused, naming the field only: overwriting
// would send something the producer did not write, and keeping it would send
// a key that is not the row's.
func withKeyField(payload []byte, name, key string) ([]byte, error) {
	var obj map[string]json.RawMessage
	trimmed := bytes.TrimLeft(payload, " \t\r\n") // JSON whitespace only (RFC 8259)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, fmt.Errorf("idempotency_key in body field %q: %w", name, errPayloadNotObject)
	}
	if err := json.Unmarshal(trimmed, &obj); err != nil {
		return nil, fmt.Errorf("idempotency_key in body field %q: %w", name, errPayloadNotObject)
	}
	if old, ok := obj[name]; ok {
		var s string
		if json.Unmarshal(old, &s) == nil && s == key {
			return payload, nil
		}
		return nil, fmt.Errorf("idempotency_key in body field %q: the payload already has that field with another value", name)
	}
	k, err := json.Marshal(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	obj[name] = k
	// SetEscapeHTML(false): the payload's strings keep their bytes.
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return nil, fmt.Errorf("idempotency_key in body field %q: re-encode payload: %w", name, err)
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}
