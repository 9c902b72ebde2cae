package mockprovider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"
)

// Wire names of the contract (docs/reference.md §5).
const (
	HeaderIdempotencyKey    = "Idempotency-Key"
	HeaderTuple             = "X-Agent-Idempotency-Tuple"
	HeaderReplay            = "Idempotency-Replay"
	HeaderConflict          = "Idempotency-Conflict"
	ConflictPayloadMismatch = "payload-mismatch"
)

// StatusOverloaded is the non-standard "529 Site is overloaded" status.
const StatusOverloaded = 529

// DefaultAddr is the listen address Start uses when given "".
const DefaultAddr = "127.0.0.1:0"

// MaxBodyBytes is the largest request body accepted; larger bodies get 413.
const MaxBodyBytes = 16 << 20

// shutdownTimeout bounds the graceful part of Close.
const shutdownTimeout = 5 * time.Second

// Provider is a mock idempotent HTTP provider. It implements http.Handler, so
// it can be served by httptest.NewServer as well as by Start.
type Provider struct {
	cfg Config

	mu         sync.Mutex
	keys       map[string]*record
	duplicates []string

	tmu    sync.Mutex
	tuples map[string][]string

	st   counters
	ra   retryAfterBook
	comp compensationBook

	done      chan struct{}
	closeOnce sync.Once

	srvMu  sync.Mutex
	srv    *http.Server
	served chan struct{}
	closed bool
}

// New returns a Provider configured by cfg. The TerminalTools map is copied;
// New panics if one of its statuses is not a three-digit HTTP status.
func New(cfg Config) *Provider {
	cfg.Fail503 = clamp01(cfg.Fail503)
	cfg.Fail429 = clamp01(cfg.Fail429)
	cfg.Fail529 = clamp01(cfg.Fail529)
	cfg.Timeout = clamp01(cfg.Timeout)
	cfg.ResetAfterEffect = clamp01(cfg.ResetAfterEffect)
	if cfg.TerminalTools != nil {
		m := make(map[string]int, len(cfg.TerminalTools))
		for tool, status := range cfg.TerminalTools {
			if status < 100 || status > 999 {
				panic(fmt.Sprintf("mockprovider: TerminalTools[%q] = %d is not an HTTP status", tool, status))
			}
			m[tool] = status
		}
		cfg.TerminalTools = m
	}
	return &Provider{
		cfg:    cfg,
		keys:   make(map[string]*record),
		tuples: make(map[string][]string),
		done:   make(chan struct{}),
	}
}

func clamp01(f float64) float64 {
	if !(f > 0) { // also catches NaN
		return 0
	}
	return min(f, 1)
}

// Start serves p on addr (DefaultAddr when empty) and returns the base URL,
// e.g. "http://127.0.0.1:41234". Any path under it is accepted; the last path
// segment names the tool. Start fails if p was already started or closed.
func (p *Provider) Start(addr string) (string, error) {
	if addr == "" {
		addr = DefaultAddr
	}
	p.srvMu.Lock()
	defer p.srvMu.Unlock()
	switch {
	case p.closed:
		return "", errors.New("mockprovider: start after Close")
	case p.srv != nil:
		return "", errors.New("mockprovider: already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	p.served = make(chan struct{})
	go func(srv *http.Server, served chan<- struct{}) {
		defer close(served)
		_ = srv.Serve(ln) // always ErrServerClosed or a listener error after Close
	}(p.srv, p.served)
	return "http://" + ln.Addr().String(), nil
}

// Close interrupts every pending Latency or Timeout sleep and, if Start was
// called, shuts the server down gracefully (forcefully after a few seconds)
// and waits for it to stop. It is safe to call more than once.
func (p *Provider) Close() {
	p.closeOnce.Do(func() { close(p.done) })

	p.srvMu.Lock()
	p.closed = true
	srv, served := p.srv, p.served
	p.srvMu.Unlock()
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close()
	}
	<-served
}
