package receiver

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Mode selects the status codes of the answers that differ between the
// documentation spec the project follows (seed) and the IETF
// Idempotency-Key draft (ietf). See docs/reference.md §11.
type Mode string

const (
	// ModeSeed is the default: a replayed 201 answers 200, a payload
	// mismatch 409.
	ModeSeed Mode = "seed"
	// ModeIETF replays the stored status unchanged and answers a payload
	// mismatch with 422.
	ModeIETF Mode = "ietf"
)

// Defaults of the options left zero.
const (
	DefaultSchema          = "drainer_receiver"
	DefaultKeyHeader       = "Idempotency-Key"
	DefaultTTL             = 24 * time.Hour
	DefaultRecoveryTimeout = 60 * time.Second
	DefaultMaxBody         = 1 << 20
	// DefaultIdleInTransactionTimeout is the default of
	// Options.IdleInTransactionTimeout.
	DefaultIdleInTransactionTimeout = time.Minute
	// MaxKeyBytes is the longest accepted idempotency key, in bytes.
	MaxKeyBytes = 255
)

// Options configure a Receiver. The zero value is valid: every field left
// zero takes its default.
type Options struct {
	// Schema holds the records table (default "drainer_receiver"); Migrate
	// creates it.
	Schema string
	// KeyHeader is the request header carrying the key (default
	// "Idempotency-Key").
	KeyHeader string
	// TTL is how long a key is honoured, from its first request (default
	// 24h). A request with an expired key runs the handler again, unless
	// the key's first request is still running (it answers in-flight).
	TTL time.Duration
	// RecoveryTimeout is how long the in-flight record of a process that
	// stopped mid-request blocks retries before a retry finds it abandoned
	// (default 60s); see RerunAbandoned for what happens then. While a
	// handler runs, its deadline moves forward every third of this, so a
	// slow handler keeps its record. With InTransaction a crash leaves no
	// record to wait for (see IdleInTransactionTimeout instead).
	RecoveryTimeout time.Duration
	// IdleInTransactionTimeout applies with InTransaction: the request's
	// transaction sets Postgres's idle_in_transaction_session_timeout to
	// it (SET LOCAL), so when the service's host freezes, is cut off or
	// vanishes mid-handler, the server ends its session after this long
	// without a statement, rolling back the record and the effect, and the
	// key is free again for a retry (without it Postgres holds them until
	// it notices the dead connection, by default about two hours). A
	// handler that stays this long without a statement in its transaction
	// (waiting on another service, say) loses its session too: nothing of
	// it commits and the client gets an error (the handler's own, or 503).
	// Default 1 minute; raise it for such a handler. Negative: not set (the
	// server's setting applies).
	IdleInTransactionTimeout time.Duration
	// Scope returns the key space of a request (an account, user or tenant
	// id taken from the authenticated request). The same key in two scopes
	// is two records. Default: one global scope ("").
	Scope func(*http.Request) string
	// Mode is ModeSeed (default) or ModeIETF.
	Mode Mode
	// RequireKey says which requests need a key; the others pass straight
	// through to the handler. Default: POST, PUT, PATCH and DELETE.
	RequireKey func(*http.Request) bool
	// MaxBody is the largest request body accepted, in bytes (default
	// 1 MiB); a larger one is answered 413 before anything is stored.
	MaxBody int64
	// StoreServerErrors stores 5xx answers too; by default they are not
	// stored and the record is released, so a retry runs the handler again.
	StoreServerErrors bool
	// StoreHeaders lists response headers stored and replayed besides
	// Content-Type and Location.
	StoreHeaders []string
	// InTransaction runs each keyed request's handler inside the database
	// transaction that writes its record; the handler reaches it with
	// Tx(r.Context()). The handler's effect, the record and the stored
	// answer commit together or not at all, so a process that dies
	// mid-request leaves nothing behind and a retry runs the handler
	// again at once. This is the recommended setting for a handler whose
	// effect is in the same database. Each keyed request then holds one
	// connection of the pool for its whole handler: size the pool's
	// MaxConns for the keyed requests expected at once (a request that
	// finds none free within 30 s is answered 503 pool-exhausted).
	InTransaction bool
	// RerunAbandoned lets a retry run the handler again when the request
	// holding the key stopped mid-run outside InTransaction (its process
	// died and the recovery timeout passed), although its effect may
	// exist. Set it only for a handler that is safe to run twice. Without
	// it such a retry is answered 409 Idempotency-Conflict:
	// outcome-unknown, the handler does not run, and the record is
	// reported (an Error log line, drainer_receiver_abandoned_total) and
	// kept for a person to resolve.
	RerunAbandoned bool
	// Registerer, when set, gets the receiver's counter
	// drainer_receiver_abandoned_total{outcome}. Receivers sharing a
	// registerer share the counter.
	Registerer prometheus.Registerer
	// Logger receives the store's failures (a claim answered 503, an
	// answer that could not be stored, a record that could not be
	// released), with the scope, never the key or payload; and the
	// reports of abandoned records at Error (outcome unknown) or Warn
	// (run again), which name the scope and the key. Default
	// slog.Default().
	Logger *slog.Logger
}

// DefaultRequireKey is the default of Options.RequireKey: POST, PUT, PATCH
// and DELETE need a key.
func DefaultRequireKey(r *http.Request) bool {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// withDefaults returns o with defaults filled in, or an error naming every
// invalid option.
func (o Options) withDefaults() (Options, error) {
	var errs []error
	if o.Schema == "" {
		o.Schema = DefaultSchema
	} else if !utf8.ValidString(o.Schema) || strings.IndexByte(o.Schema, 0) >= 0 || len(o.Schema) > 63 {
		errs = append(errs, fmt.Errorf("receiver: option Schema %q must be valid UTF-8 without NUL, at most 63 bytes", o.Schema))
	}
	if o.KeyHeader == "" {
		o.KeyHeader = DefaultKeyHeader
	}
	o.KeyHeader = http.CanonicalHeaderKey(o.KeyHeader)
	switch {
	case o.TTL == 0:
		o.TTL = DefaultTTL
	case o.TTL < time.Millisecond:
		errs = append(errs, fmt.Errorf("receiver: option TTL is %v, must be at least 1ms", o.TTL))
	}
	switch {
	case o.RecoveryTimeout == 0:
		o.RecoveryTimeout = DefaultRecoveryTimeout
	case o.RecoveryTimeout < time.Millisecond:
		errs = append(errs, fmt.Errorf("receiver: option RecoveryTimeout is %v, must be at least 1ms", o.RecoveryTimeout))
	}
	switch d := o.IdleInTransactionTimeout; {
	case d == 0:
		o.IdleInTransactionTimeout = DefaultIdleInTransactionTimeout
	case d > 0 && (d < time.Millisecond || d.Milliseconds() > math.MaxInt32):
		errs = append(errs, fmt.Errorf("receiver: option IdleInTransactionTimeout is %v, must be from 1ms to %v (or negative: not set)",
			d, time.Duration(math.MaxInt32)*time.Millisecond))
	}
	if o.Scope == nil {
		o.Scope = func(*http.Request) string { return "" }
	}
	switch o.Mode {
	case "":
		o.Mode = ModeSeed
	case ModeSeed, ModeIETF:
	default:
		errs = append(errs, fmt.Errorf("receiver: option Mode is %q, must be %q or %q", o.Mode, ModeSeed, ModeIETF))
	}
	if o.RequireKey == nil {
		o.RequireKey = DefaultRequireKey
	}
	switch {
	case o.MaxBody == 0:
		o.MaxBody = DefaultMaxBody
	case o.MaxBody < 0:
		errs = append(errs, fmt.Errorf("receiver: option MaxBody is %d, must not be negative", o.MaxBody))
	}
	stored := []string{"Content-Type", "Location"}
	for _, h := range o.StoreHeaders {
		if h == "" {
			errs = append(errs, errors.New("receiver: option StoreHeaders holds an empty header name"))
			continue
		}
		stored = append(stored, http.CanonicalHeaderKey(h))
	}
	o.StoreHeaders = stored
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, errors.Join(errs...)
}
