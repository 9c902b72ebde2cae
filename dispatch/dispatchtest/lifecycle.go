package dispatchtest

import (
	"context"
	"io"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/drainer-io/drainer/dispatch"
)

// closeTimeout bounds an adapter's Close(ctx).
const closeTimeout = 10 * time.Second

// leakGrace is how long goroutines may take to exit once the adapter and the
// upstream are closed: transports and pools stop theirs asynchronously, and
// on a machine loaded far past its cores a closed connection's reader
// (pgx's background reader) was seen still running after 3 s. A goroutine
// that never exits fails all the same; one that does costs nothing more.
const leakGrace = 20 * time.Second

// setup starts a check: it snapshots the running goroutines, builds the
// adapter with f and arranges, with t.Cleanup, for the adapter to be closed
// and then, once the factory's own cleanups have released the upstream, for
// any goroutine started since the snapshot to fail t.
func setup(t *testing.T, f Factory) (dispatch.Adapter, Upstream, string) {
	t.Helper()
	// Cleanups run last-in first-out: registered before the factory's, the
	// leak check runs after the upstream is gone.
	NoGoroutineLeft(t)
	a, up, secret := f(t)
	if a == nil || up == nil {
		t.Fatal("factory returned a nil adapter or upstream")
	}
	t.Cleanup(func() { closeAdapter(t, a) })
	return a, up, secret
}

// NoGoroutineLeft fails t, once every cleanup registered after this call
// has run (the adapter closed, the upstream released), if a goroutine
// started since this call is still running leakGrace later. A test calling
// it must not run in parallel with others: it would count theirs.
func NoGoroutineLeft(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { // registered first, so it runs last
		deadline := time.Now().Add(leakGrace)
		for {
			err := goleak.Find(ignore) // itself retries for a few hundred ms
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("goroutines left running after the adapter was closed: %v", err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// closeAdapter closes a if it has a Close method of a known shape.
func closeAdapter(t *testing.T, a dispatch.Adapter) {
	t.Helper()
	var err error
	switch c := a.(type) {
	case interface{ Close(context.Context) error }:
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		err = c.Close(ctx)
	case io.Closer:
		err = c.Close()
	case interface{ Close() }:
		c.Close()
	}
	if err != nil {
		t.Errorf("close adapter: %v", err)
	}
}
