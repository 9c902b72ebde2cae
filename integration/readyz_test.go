//go:build integration

package integration

import (
	"fmt"
	"github.com/drainer-io/drainer/tooling/testkit"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"syscall"
	"testing"
	"time"
)

// cutProxy forwards TCP to a target and can drop every connection and refuse
// new ones (the database "stops") and accept again (it "recovers").
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.setDown(true) })
	return p
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(u, c); u.Close() }()
		go func() { _, _ = io.Copy(c, u); c.Close() }()
	}
}

func (p *cutProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// TestReadinessFollowsDatabase: /readyz turns 503 while the database is
// unreachable and 200 again once it is back; /healthz stays 200 and the
// daemon keeps draining after the outage.
func TestReadinessFollowsDatabase(t *testing.T) {
	t.Parallel()
	dbURL, pool := newMigratedDB(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newCutProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", httpConfig(srv.URL, "", "charge_card"))
	d := startDaemon(t, "readyz", "--config", cfgPath, "--database-url", u.String())
	d.waitReady(30 * time.Second)

	proxy.setDown(true)
	testkit.WaitFor(t, 20*time.Second, "/readyz 503 while the database is down", func() (bool, string) {
		code, body := d.get("/readyz")
		return code == 503, fmt.Sprintf("%d %s", code, body)
	})
	if code, _ := d.get("/healthz"); code != 200 {
		t.Fatalf("/healthz %d while the database is down; the process is alive", code)
	}
	proxy.setDown(false)
	d.waitReady(30 * time.Second)

	if _, err := pool.Exec(t.Context(), "SELECT drainer.enqueue('r', 's', 'charge_card', '', '{}')"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "a row drains after the outage", func() (bool, string) {
		c := statusCounts(t, pool)
		return c["succeeded"] == 1, fmt.Sprint(c)
	})
	d.signal(syscall.SIGTERM)
	if code := d.exitCode(20 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
}
