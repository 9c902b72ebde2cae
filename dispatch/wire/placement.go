package wire

// Key locations of a KeyPlacement (docs/reference.md §5).
const (
	LocationHeader = "header"
	LocationQuery  = "query"
	LocationBody   = "body"
)

// DefaultKeyHeader is the header that carries the idempotency key by
// default.
const DefaultKeyHeader = "Idempotency-Key"

// KeyPlacement says where an http request's idempotency key travels: header
// Name, query parameter Name, or top-level field Name of the JSON-object
// payload. The zero value means the default, header Idempotency-Key. It is
// the idempotency_key of an http adapter and of its routes.
type KeyPlacement struct {
	Name string `yaml:"name"`
	// Location is header (default), query or body.
	Location string `yaml:"location"`
}

// IsZero reports whether p is unset.
func (p KeyPlacement) IsZero() bool { return p == KeyPlacement{} }

// WithDefaults fills an unset placement with the default header, and an
// unset location with header.
func (p KeyPlacement) WithDefaults() KeyPlacement {
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
