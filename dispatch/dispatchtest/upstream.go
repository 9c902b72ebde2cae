package dispatchtest

import (
	"testing"

	"github.com/drainer-io/drainer/dispatch"
)

// Fault is a failure the upstream can be told to produce.
type Fault int

const (
	// FaultTransient: the provider answers "try again" (e.g. 503).
	FaultTransient Fault = iota + 1
	// FaultTerminal: the provider refuses the request for good (e.g. 422).
	FaultTerminal
	// FaultHang: the provider never answers (until the attempt's context ends).
	FaultHang
)

// String returns the fault's name, for messages.
func (f Fault) String() string {
	switch f {
	case FaultTransient:
		return "transient"
	case FaultTerminal:
		return "terminal"
	case FaultHang:
		return "hang"
	}
	return "fault(invalid)"
}

// Upstream is the fake or real provider an adapter under test talks to.
type Upstream interface {
	// Effects returns how many effects the upstream holds for key.
	Effects(t *testing.T, key string) int
	// Inject makes the next n requests fail with f; it returns false when the
	// upstream cannot produce f (that check is then skipped, with a log line).
	Inject(f Fault, n int) bool
}

// Factory builds an adapter wired to a fresh upstream. secret is a credential
// value the adapter was configured with ("" if none), checked never to leak.
// Upstream resources are released with t.Cleanup; Run closes the adapter.
type Factory func(t *testing.T) (a dispatch.Adapter, up Upstream, secret string)
