//go:build integration

package integration

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// chaosProxy starts an in-process toxiproxy proxy on a free local port in
// front of upstream (host:port); it stops when the test ends.
func chaosProxy(t *testing.T, name, upstream string) *toxiproxy.Proxy {
	t.Helper()
	zerolog.SetGlobalLevel(zerolog.WarnLevel) // toxics log every interrupted pipe at trace level
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("toxiproxy %s: %v", name, err)
	}
	t.Cleanup(p.Stop)
	return p
}

// chaosToxic adds a toxic (JSON as toxiproxy's API takes it).
func chaosToxic(t *testing.T, p *toxiproxy.Proxy, name, typ, stream string, attrs string) {
	t.Helper()
	js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		t.Fatalf("add toxic %s to %s: %v", name, p.Name, err)
	}
}

func chaosUntoxic(t *testing.T, p *toxiproxy.Proxy, name string) {
	t.Helper()
	if err := p.Toxics.RemoveToxic(context.Background(), name); err != nil {
		t.Fatalf("remove toxic %s from %s: %v", name, p.Name, err)
	}
}

// chaosToxiproxy: toxiproxy between the daemons and Postgres and between the
// daemons and the provider; a sequence of toxics (latency, reset_peer,
// timeout i.e. half-open, bandwidth, slicer) runs during the drain, then the
// provider is unreachable for longer than the breaker window, then back.
func chaosToxiproxy(t *testing.T, seed uint64) {
	var provProxy *toxiproxy.Proxy
	s := newChaosSetupVia(t, chaosRows(400, 20000), seed, func(baseURL string) string {
		u, err := url.Parse(baseURL)
		if err != nil {
			t.Fatal(err)
		}
		provProxy = chaosProxy(t, "provider", u.Host)
		u.Host = provProxy.Listen
		return u.String()
	})
	du, err := url.Parse(s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	pgProxy := chaosProxy(t, "postgres", du.Host)
	du.Host = pgProxy.Listen
	daemonDB := du.String()

	replicas := make([]*daemon, 3)
	for i := range replicas {
		replicas[i] = startDaemon(t, "replica-"+strconv.Itoa(i),
			"--config", s.cfgPath, "--database-url", daemonDB, "--shutdown-timeout", "10s")
	}
	start := time.Now()

	type step struct {
		proxy          string
		name, typ, dir string
		attrs          string
	}
	steps := []step{
		{"provider", "lat", "latency", "downstream", `{"latency":300,"jitter":200}`},
		{"postgres", "lat", "latency", "upstream", `{"latency":20,"jitter":20}`},
		{"provider", "reset", "reset_peer", "upstream", `{"timeout":50}`},
		{"provider", "halfopen", "timeout", "downstream", `{"timeout":0}`},
		{"postgres", "bw", "bandwidth", "downstream", `{"rate":64}`},
		{"provider", "slow", "limit_data", "downstream", `{"bytes":100}`},
		{"postgres", "reset", "reset_peer", "downstream", `{"timeout":200}`},
	}
	proxies := map[string]*toxiproxy.Proxy{"provider": provProxy, "postgres": pgProxy}
	for i, st := range steps {
		if i > 0 && s.drained(t) {
			break
		}
		p := proxies[st.proxy]
		from := time.Now()
		chaosToxic(t, p, st.name, st.typ, st.dir, st.attrs)
		time.Sleep(time.Duration(1000+s.rng.IntN(1500)) * time.Millisecond)
		chaosUntoxic(t, p, st.name)
		if st.proxy == "provider" {
			s.lossWindows = append(s.lossWindows, lossWindow{from, time.Now()})
		}
		t.Logf("toxic %s/%s done; %v", st.proxy, st.typ, statusCounts(t, s.pool))
	}
	// The provider is down (connections refused) longer than the breaker's
	// open_for, then back.
	from := time.Now()
	provProxy.Stop()
	time.Sleep(3 * time.Second)
	if err := provProxy.Start(); err != nil {
		// The port was taken in between: say so rather than hang.
		t.Fatalf("restart provider proxy on %s: %v", provProxy.Listen, err)
	}
	s.lossWindows = append(s.lossWindows, lossWindow{from, time.Now()})
	s.waitSettled(t, nil)
	chaosResults.add(chaosCheck(t, "toxiproxy", s, time.Since(start)))
	for _, r := range replicas {
		r.signal(syscall.SIGTERM)
	}
	for _, r := range replicas {
		r.wait(30 * time.Second)
	}
}
