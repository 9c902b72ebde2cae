package daemon

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/config"
	"github.com/prometheus/client_golang/prometheus"
)

// TestListenersRefusedAsSettings: an address that cannot be served, the
// metrics', the gateway's (taken, or off loopback without a token), is a
// setting to change (ConfigError: exit 2) named by where it was given.
func TestListenersRefusedAsSettings(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, err = serveHTTP(taken.Addr().String(), prometheus.NewRegistry(), &readiness{}, nil, nil, log)
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), "--metrics-addr: listen on "+taken.Addr().String()) {
		t.Errorf("metrics address taken: %T %v; want a ConfigError naming --metrics-addr", err, err)
	}

	for _, c := range []struct {
		flag, key, want string
	}{
		{"0.0.0.0:0", "", "--gateway-addr: \"0.0.0.0:0\" is not a loopback address"},
		{"", "0.0.0.0:0", "gateway.addr: \"0.0.0.0:0\" is not a loopback address"},
		{"", taken.Addr().String(), "gateway: listen on " + taken.Addr().String()},
	} {
		d := &daemonRun{opts: Options{GatewayAddr: c.flag}, st: settings{cfg: &config.Config{Gateway: config.Gateway{Addr: c.key}}}}
		ln, err := d.listenGateway()
		if ln != nil {
			ln.Close()
		}
		if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("gateway address %q (flag) %q (config): %T %v; want a ConfigError starting %q", c.flag, c.key, err, err, c.want)
		}
	}
}
