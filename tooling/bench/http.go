package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/builtin"
	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/internal/daemon"
)

// httpDelay is how long the http phase's provider takes to answer.
const httpDelay = 50 * time.Millisecond

// httpConfig is the http phase's config: the shipped defaults, one http
// adapter pointing at the local provider (%s: its address).
const httpConfig = `# drainer bench: shipped defaults, one http adapter.
adapters:
  web:
    type: http
    url: http://%s/{tool_name}
routes:
  ` + benchTool + `:
    adapter: web
`

// provider is the http phase's local provider: it answers 200 after
// httpDelay and counts requests and how many are under way at once.
type provider struct {
	target   int64
	calls    atomic.Int64
	inFlight atomic.Int64
	maxMu    sync.Mutex
	max      int64
	reached  chan struct{}
}

func (p *provider) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	n := p.inFlight.Add(1)
	p.maxMu.Lock()
	p.max = max(p.max, n)
	p.maxMu.Unlock()
	t := time.NewTimer(httpDelay)
	select {
	case <-t.C:
	case <-req.Context().Done():
	}
	t.Stop()
	p.inFlight.Add(-1)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"ok":true}`))
	if p.calls.Add(1) == p.target {
		close(p.reached)
	}
}

func (p *provider) maxInFlight() int {
	p.maxMu.Lock()
	defer p.maxMu.Unlock()
	return int(p.max)
}

// httpPhase drains Rows rows through the http adapter, built from config
// as `drainer run` builds it, against the local provider.
func (r *runner) httpPhase(ctx context.Context, res *Result) (err error) {
	n := r.sizes.Rows
	p := &provider{target: int64(n), reached: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("http provider: %w", err)
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ln) })
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if serr := srv.Shutdown(sctx); serr != nil && err == nil {
			err = fmt.Errorf("http provider: %w", serr)
		}
		wg.Wait()
	}()
	cfg, err := config.Parse("bench.yaml", fmt.Appendf(nil, httpConfig, ln.Addr()), config.LoadOptions{})
	if err != nil {
		return fmt.Errorf("bench http config: %w", err)
	}
	var regs []*dispatch.Registry
	defer func() {
		for _, reg := range regs {
			if cerr := reg.Close(context.WithoutCancel(ctx)); cerr != nil && err == nil {
				err = cerr
			}
		}
	}()
	mk := func() (*drainer.Routing, *config.Config, error) {
		reg, err := builtin.Build(ctx, cfg, builtin.Options{Version: r.opts.Version})
		if err != nil {
			return nil, nil, err
		}
		regs = append(regs, reg)
		return daemon.NewRouting(cfg, reg), cfg, nil
	}

	r.logf("http: draining %d rows through the http adapter; the provider answers after %s", n, httpDelay)
	if err := r.fill(ctx, n); err != nil {
		return err
	}
	begin := time.Now()
	es, err := r.startEnginesWith(ctx, mk)
	if err != nil {
		return err
	}
	err = r.awaitSucceeded(ctx, p.reached, p.calls.Load, n)
	elapsed := time.Since(begin)
	if serr := es.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return errors.Join(errors.New("http"), err)
	}
	rate := float64(n) / elapsed.Seconds()
	res.HTTPRowsPerS, res.HTTPInFlightMax, res.HTTPDelayMs = round(rate, 1), p.maxInFlight(), ms(httpDelay)
	r.logf("http: %d rows in %s = %.0f rows/s, at most %d requests in flight (%d replicas × %d workers)",
		n, elapsed.Round(time.Millisecond), rate, res.HTTPInFlightMax, r.opts.Replicas, r.opts.Workers)
	return nil
}
