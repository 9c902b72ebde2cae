package daemon

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/tooling/pgtemp"
	"github.com/jackc/pgx/v5"
)

// silentProxy forwards TCP connections to a server until silence: from
// then on it reads what either side sends and passes nothing on, as a
// network that drops packets or a frozen server does. Closing it ends
// every connection.
type silentProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	silent bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newSilentProxy(t *testing.T, target string) *silentProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *silentProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(s, c)
		go p.pipe(c, s)
	}
}

// pipe copies from src to dst while the proxy is not silent.
func (p *silentProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		p.mu.Lock()
		silent := p.silent
		p.mu.Unlock()
		if silent {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

func (p *silentProxy) silence() {
	p.mu.Lock()
	p.silent = true
	p.mu.Unlock()
}

func (p *silentProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestStopIsBoundedWhenTheDatabaseGoesSilent: a daemon told to stop while
// its database answers nothing (the network drops everything) ends within
// its shutdown timeout and 7 s: the engine's last writes are cut off 5 s
// past its deadline, the pool's close 2 s later (poolCloseWait). The bound
// checked is 13 s past the timeout. Before, the pool's Close waited for
// every connection in use, held by statements the server never answered,
// until their own timeouts: 21 s here with a 1 s shutdown timeout, 43 s
// and more with 5 s in a probe's runs.
func TestStopIsBoundedWhenTheDatabaseGoesSilent(t *testing.T) {
	t.Parallel()
	c, err := pgtemp.Start(t.Context(), pgtemp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	createMigrated(t, c, "silent")
	cc, err := pgx.ParseConfig(c.URL("silent"))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newSilentProxy(t, net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	u := *cc
	proxied := "postgres://" + u.User + ":" + u.Password + "@" + proxy.ln.Addr().String() + "/" + u.Database + "?sslmode=disable"
	cfg, err := config.Parse("c.yaml", []byte("adapters:\n  p: {type: http, url: \"http://127.0.0.1:1/{tool_name}\"}\nroutes:\n  t: {adapter: p}\n"), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Config: cfg, DatabaseURL: proxied, MetricsAddr: "127.0.0.1:0", ShutdownTimeout: time.Second,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Started: func(*drainer.Engine) { close(started) }})
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("run ended before its engine started: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the engine did not start within a minute")
	}
	proxy.silence()
	// The engine's periodic statements (the poll's claim, the snapshot, the
	// reclaim) go out now and are never answered: their connections stay
	// in use.
	time.Sleep(3 * time.Second)
	stop := time.Now()
	cancel()
	select {
	case <-done:
		t.Logf("run returned %v after the stop", time.Since(stop).Round(time.Millisecond))
	case <-time.After(14 * time.Second):
		t.Fatal("run did not return within 14 s of the stop (shutdown timeout 1 s) while the database was silent")
	}
}
