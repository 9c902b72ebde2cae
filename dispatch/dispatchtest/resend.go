package dispatchtest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// DropOnReuse is an HTTP provider that answers the first request of each
// connection normally (keep-alive), and on any later request of the same
// connection reads the request, applies its effect, then closes the
// connection without answering: the ambiguous case that an HTTP client must
// report to the engine rather than paper over by sending the request again
// on a fresh connection (which Go's transport does for requests it deems
// replayable).
type DropOnReuse struct {
	*httptest.Server
	requests atomic.Int64
	mu       sync.Mutex
	perConn  map[string]int
	effects  map[string]int
}

// NewDropOnReuse starts a DropOnReuse whose first request per connection is
// answered by answer; it is closed when t ends.
func NewDropOnReuse(t *testing.T, answer http.HandlerFunc) *DropOnReuse {
	t.Helper()
	d := &DropOnReuse{perConn: map[string]int{}, effects: map[string]int{}}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.requests.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		d.mu.Lock()
		d.perConn[r.RemoteAddr]++
		n := d.perConn[r.RemoteAddr]
		d.effects[r.Header.Get("Idempotency-Key")]++
		d.mu.Unlock()
		if n == 1 {
			answer(w, r)
			return
		}
		hj, ok := w.(http.Hijacker)
		if !ok {
			panic("dispatchtest: response writer cannot hijack")
		}
		conn, _, err := hj.Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	t.Cleanup(d.Close)
	return d
}

// Requests returns how many requests reached the provider.
func (d *DropOnReuse) Requests() int { return int(d.requests.Load()) }

// Effects returns how many requests with Idempotency-Key key reached it.
func (d *DropOnReuse) Effects(key string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.effects[key]
}
