package webhook

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/drainer-io/drainer/dispatch/wire"
)

// Key locations of a KeyPlacement (docs/reference.md §5).
const (
	LocationHeader = wire.LocationHeader
	LocationQuery  = wire.LocationQuery
	LocationBody   = wire.LocationBody
)

// DefaultKeyHeader is the header that carries the key by default.
const DefaultKeyHeader = wire.DefaultKeyHeader

// KeyPlacement says where the idempotency key travels: header Name, query
// parameter Name, or top-level field Name of the JSON-object payload. The zero
// value means the default, header Idempotency-Key.
type KeyPlacement = wire.KeyPlacement

// checkPlacement checks one placement at path against the adapter's URL
// template and configured headers. Its messages quote the placement's name
// (a config identifier), never a URL or a header value.
func checkPlacement(c *wire.Checker, path string, p KeyPlacement, urlTmpl string, headers map[string]string) {
	lp, np := wire.Join(path, "location"), wire.Join(path, "name")
	loc := cmp.Or(p.Location, LocationHeader)
	// A location that is unknown or unusable is reported (or was, while
	// decoding); the name is still checked, except against the location.
	locKnown := true
	if c.Set(lp, p.Location == "") {
		switch {
		case !c.Known(lp):
			locKnown = false
		case !slices.Contains([]string{LocationHeader, LocationQuery, LocationBody}, p.Location):
			c.Errorf(lp, "must be one of header, query or body, got %s", c.Quote(lp, p.Location))
			locKnown = false
		}
	}
	if p.IsZero() || !c.Require(np, p.Name == "") {
		return
	}
	switch {
	case p.Name == "":
		c.Errorf(np, "must not be empty")
	case !locKnown:
	case loc == LocationHeader:
		switch {
		case !wire.ValidHeaderName(p.Name):
			c.Errorf(np, "%q is not a valid header name (letters, digits and !#$%%&'*+-.^_`|~ only)", p.Name)
		case wire.HeaderIn(p.Name, wire.NotKeyCarriers):
			c.Errorf(np, "header %s is set by drainer on every request and cannot carry the key", p.Name)
		case !strings.EqualFold(p.Name, DefaultKeyHeader) && slices.ContainsFunc(slices.Collect(maps.Keys(headers)),
			func(h string) bool { return strings.EqualFold(h, p.Name) }):
			c.Errorf(np, "header %s is also configured in the adapter's headers", p.Name)
		}
	case loc == LocationQuery:
		if u, err := url.Parse(strings.ReplaceAll(urlTmpl, toolNameVar, "x")); err == nil && u.Query().Has(p.Name) {
			c.Errorf(np, "query parameter %s is already in the adapter's url", p.Name)
		}
	}
}

// placementFor returns the placement of tool: its override, else the adapter's.
func (c Config) placementFor(tool string) KeyPlacement {
	if p, ok := c.ToolKeyPlacement[tool]; ok {
		return p.WithDefaults()
	}
	return c.KeyPlacement.WithDefaults()
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
