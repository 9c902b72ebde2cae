//go:build integration

package integration

import (
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The model's partition action: each replica reaches Postgres through a
// proxy of its own that can stop passing bytes, as a network partition, a
// hung connection pooler or a black-holed NAT mapping does. Nothing is
// closed: the replica's connections stay open and silent, so only the
// replica's own bounds (statement deadlines, pings, the lease) can tell
// them dead; the server's sessions behind them stay open too, with
// whatever they hold (docs/reliability.md, "The model-checked random
// test").

// holdProxy forwards TCP connections to target. While partitioned it
// passes nothing either way; a connection that existed during a black
// hole passes nothing ever again (its bytes vanish), one that existed
// during a stall resumes once the partition heals.
type holdProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	healed  *sync.Cond
	down    bool
	hole    bool // the partition in force, or the last, is a black hole
	doomed  map[*holdConn]bool
	live    map[*holdConn]bool
	partsN  int
	closing bool
}

type holdConn struct{ client, server net.Conn }

func newHoldProxy(t *testing.T, target string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln, target: target, doomed: map[*holdConn]bool{}, live: map[*holdConn]bool{}}
	p.healed = sync.NewCond(&p.mu)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// url is dbURL with its host replaced by the proxy's.
func (p *holdProxy) url(t *testing.T, dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

func (p *holdProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil { // Postgres is down (a restart): refused, as it would be
			c.Close()
			continue
		}
		hc := &holdConn{client: c, server: s}
		p.mu.Lock()
		p.live[hc] = true
		if p.down && p.hole {
			p.doomed[hc] = true
		}
		p.mu.Unlock()
		go p.pipe(hc, c, s)
		go p.pipe(hc, s, c)
	}
}

// pipe copies src to dst while the partition lets it: bytes read during a
// partition wait for the heal, or vanish if the connection is doomed.
func (p *holdProxy) pipe(hc *holdConn, src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	defer func() {
		p.mu.Lock()
		doomed := p.doomed[hc]
		delete(p.live, hc)
		p.mu.Unlock()
		if !doomed {
			hc.client.Close()
			hc.server.Close()
		}
	}()
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.down && !p.closing {
				p.healed.Wait()
			}
			doomed := p.doomed[hc]
			p.mu.Unlock()
			if !doomed {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// partition stops every byte; with hole, every connection open now or
// opened before the heal is lost for good.
func (p *holdProxy) partition(hole bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down, p.hole = true, hole
	p.partsN++
	if hole {
		for hc := range p.live {
			p.doomed[hc] = true
		}
	}
}

func (p *holdProxy) heal() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
	p.healed.Broadcast()
}

func (p *holdProxy) partitioned() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down
}

func (p *holdProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closing, p.down = true, false
	conns := make([]*holdConn, 0, len(p.live)+len(p.doomed))
	for hc := range p.live {
		conns = append(conns, hc)
	}
	for hc := range p.doomed {
		conns = append(conns, hc)
	}
	p.mu.Unlock()
	p.healed.Broadcast()
	for _, hc := range conns {
		hc.client.Close()
		hc.server.Close()
	}
}

// actPartition cuts a running replica off Postgres (a stall, or a black
// hole that loses its connections for good), or heals the partition in
// force. The cut replica's rows must be handed over once their leases
// expire, and once healed it must drain and be woken again: the settle's
// bound and the wake-up probes (each replica alone) hold it to that.
func (m *seqModel) actPartition(rt *rapid.T) bool {
	for i, r := range m.e.replicas {
		if r.proxy.partitioned() {
			r.proxy.heal()
			m.e.healedAt = time.Now()
			m.e.noteAbility()
			m.rt.Logf("partition: healed replica %d", i)
			return true
		}
	}
	i := rapid.IntRange(0, len(m.e.replicas)-1).Draw(rt, "replica")
	r := m.e.replicas[i]
	if !r.stopped.IsZero() {
		return false
	}
	hole := rapid.Bool().Draw(rt, "black_hole")
	m.faulted = true
	r.proxy.partition(hole)
	m.e.noteAbility()
	m.tally["partitions"]++
	kind := "stall"
	if hole {
		kind = "black hole"
		m.tally["black holes"]++
	}
	m.rt.Logf("partition: replica %d (%s) cut off Postgres: %s", i, r.d.name, kind)
	return true
}

// healPartitions ends the partitions in force (the settle's first step).
func (m *seqModel) healPartitions() {
	for i, r := range m.e.replicas {
		if r.proxy.partitioned() {
			r.proxy.heal()
			m.e.healedAt = time.Now()
			m.e.noteAbility()
			m.rt.Logf("settle: healed replica %d", i)
		}
	}
}

// waitWakeBound waits, before the wake-up probes, until a replica healed
// of a black hole has had the time reference §3 gives it to find its
// listener's connection dead and replace it: a connection quiet for 10 s
// is pinged, a dead one found within 15 s, and a reconnect that failed
// during the partition is retried within 10 s. Until then its pick-ups
// may come from a poll, as documented.
func (m *seqModel) waitWakeBound() {
	if m.e.healedAt.IsZero() {
		return
	}
	if rest := partitionWakeBound - time.Since(m.e.healedAt); rest > 0 {
		m.tally["wake-up waits after a heal"]++
		time.Sleep(rest)
	}
}

// partitionWakeBound is waitWakeBound's bound: 15 s to find a dead
// connection, 10 s of reconnect back-off, 5 s for the connect and LISTEN.
const partitionWakeBound = 30 * time.Second
