package natsjs

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// proxy is a TCP proxy between an adapter and a NATS server that reads the
// client's protocol well enough to steer publishes: rewriteNext sends the
// next n publishes to one subject to another subject instead, where the
// real server produces the fault (no stream, a stream that refuses, a
// subscriber that never answers). Server-to-client bytes pass unchanged.
type proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	rewrites []rewrite
	refuse   bool // close new connections at once
}

type rewrite struct{ from, to string }

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: strings.TrimPrefix(target, "nats://"), conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// addr is the proxy's host:port.
func (p *proxy) addr() string { return p.ln.Addr().String() }

// rewriteNext redirects the next n publishes to subject from to subject to.
func (p *proxy) rewriteNext(from, to string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range n {
		p.rewrites = append(p.rewrites, rewrite{from, to})
	}
}

// cut closes every connection; with refuse, new ones are closed at once
// until cut is called again with refuse false.
func (p *proxy) cut(refuse bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = refuse
	for c := range p.conns {
		c.Close()
	}
}

func (p *proxy) close() {
	p.ln.Close()
	p.cut(true)
	p.wg.Wait()
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refuse {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	c.Close()
}

func (p *proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(client) {
			client.Close()
			continue
		}
		upstream, err := net.Dial("tcp", p.target)
		if err != nil || !p.track(upstream) {
			if upstream != nil {
				upstream.Close()
			}
			p.untrack(client)
			continue
		}
		p.wg.Go(func() {
			defer p.untrack(client)
			defer p.untrack(upstream)
			_, _ = io.Copy(client, upstream)
		})
		p.wg.Go(func() {
			defer p.untrack(client)
			defer p.untrack(upstream)
			_ = p.forward(upstream, client)
		})
	}
}

// forward copies the client's protocol to the server, one operation at a
// time, rewriting the subject of PUB and HPUB operations when asked to.
func (p *proxy) forward(dst io.Writer, src io.Reader) error {
	r := bufio.NewReaderSize(src, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return err
		}
		fields := bytes.Fields(line)
		if len(fields) >= 3 && (bytes.EqualFold(fields[0], []byte("PUB")) || bytes.EqualFold(fields[0], []byte("HPUB"))) {
			size, err := strconv.Atoi(string(fields[len(fields)-1]))
			if err != nil || size < 0 {
				return errors.New("proxy: bad message size")
			}
			body := make([]byte, size+2) // payload and CRLF
			if _, err := io.ReadFull(r, body); err != nil {
				return err
			}
			if to, ok := p.take(string(fields[1])); ok {
				fields[1] = []byte(to)
				line = append(bytes.Join(fields, []byte(" ")), '\r', '\n')
			}
			line = append(line, body...)
		}
		if _, err := dst.Write(line); err != nil {
			return err
		}
	}
}

// take pops the next rewrite if it applies to subject.
func (p *proxy) take(subject string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.rewrites) == 0 || p.rewrites[0].from != subject {
		return "", false
	}
	to := p.rewrites[0].to
	p.rewrites = p.rewrites[1:]
	return to, true
}
