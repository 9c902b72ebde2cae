package testkit

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Later is a provider that comes up after the test began: a TCP address on
// which nothing listens (a connection there is refused) until Open, after
// which it forwards every connection to a real server. It plays a provider
// that is unreachable when a daemon starts and then answers.
type Later struct {
	// Addr is the host:port to configure.
	Addr   string
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewLater reserves a free local port for a provider that will forward to
// target (host:port). It is closed, with its connections, when t ends.
func NewLater(t testing.TB, target string) *Later {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Later{Addr: ln.Addr().String(), target: target, conns: map[net.Conn]struct{}{}}
	_ = ln.Close()
	t.Cleanup(l.close)
	return l
}

// Open starts listening on Addr and forwarding its connections to the
// target.
func (l *Later) Open(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("tcp", l.Addr)
	if err != nil {
		t.Fatalf("listen on %s again: %v", l.Addr, err)
	}
	l.mu.Lock()
	l.ln = ln
	l.mu.Unlock()
	l.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.wg.Go(func() { l.forward(c) })
		}
	})
}

// forward copies c to a new connection to the target and back, until
// either side closes.
func (l *Later) forward(c net.Conn) {
	up, err := net.Dial("tcp", l.target)
	if err != nil || !l.track(c, up) {
		c.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	var both sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
	}
	both.Go(func() { pipe(up, c) })
	both.Go(func() { pipe(c, up) })
	both.Wait()
}

// track records the pair of connections, unless the forwarder is closed.
func (l *Later) track(c ...net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conns == nil {
		return false
	}
	for _, x := range c {
		l.conns[x] = struct{}{}
	}
	return true
}

// close stops listening, closes every forwarded connection and waits for
// the goroutines.
func (l *Later) close() {
	l.mu.Lock()
	if l.ln != nil {
		_ = l.ln.Close()
	}
	for c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
	l.mu.Unlock()
	l.wg.Wait()
}
