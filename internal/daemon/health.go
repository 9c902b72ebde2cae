package daemon

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/drainer"
)

// readiness is whether the daemon is ready and, while it is not, why:
// what /readyz says while it starts (connecting to an unreachable
// database, waiting for the schema) or stops.
type readiness struct {
	ready atomic.Bool
	why   atomic.Pointer[string]
}

// notReady makes /readyz answer 503 with why.
func (r *readiness) notReady(why string) {
	r.why.Store(&why)
	r.ready.Store(false)
}

func (r *readiness) setReady() { r.ready.Store(true) }

func (r *readiness) reason() string {
	if why := r.why.Load(); why != nil {
		return *why
	}
	return "starting"
}

// readyz answers /readyz: 503 while the daemon starts or stops or the
// database does not answer, else 200. An adapter that cannot send (breaker
// open, credentials refused on several routes) holds back its own rows
// only: the other adapters drain, so the replica stays ready (restarting or
// unrouting it would not bring the provider back) and the body names the
// adapter, as drainer_adapter_ready does.
func readyz(ready *readiness, ping func(context.Context) error, adapters func() []drainer.AdapterState) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ready.ready.Load() {
			http.Error(w, "not ready: "+ready.reason(), http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ping(ctx); err != nil {
			http.Error(w, "not ready: database unreachable", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		var down []string
		for _, a := range adapters() {
			if !a.Ready {
				down = append(down, fmt.Sprintf("%s (%s)", a.Adapter, a.Reason))
			}
		}
		if len(down) == 0 {
			_, _ = w.Write([]byte("ready\n"))
			return
		}
		_, _ = fmt.Fprintf(w, "ready; adapters not ready (their rows wait, the others drain): %s\n", strings.Join(down, ", "))
	})
}
