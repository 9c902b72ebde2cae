package gateway_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/gateway"
	"github.com/drainer-io/drainer/internal/daemon"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// TestReloadRotatesTheGatewayToken: a token rotated in its file and
// reloaded (SIGHUP) is the only one the gateway accepts from then on: the
// old one, revoked, is refused. Before, the gateway kept the token it
// started with, while the log said the config was reloaded.
func TestReloadRotatesTheGatewayToken(t *testing.T) {
	t.Parallel()
	ts := newToolServer(t)
	pool := storetest.NewPool(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("first-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`adapters:
  tools:
    type: mcp
    url: %s
    headers: {Authorization: "Bearer ${env:GW_TEST_UPSTREAM_TOKEN}"}
routes:
  charge: {adapter: tools, class: key_idempotent}
gateway:
  token: ${file:%s}
`, ts.url, tokenFile)
	path := filepath.Join(dir, "drainer.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reload := make(chan struct{}, 1)
	runDaemon(t, daemon.Options{ConfigPath: path, DatabaseURL: pool.Config().ConnString(), GatewayListener: ln, Reload: reload})
	url := "http://" + ln.Addr().String() + gateway.Path
	status := func(token string) int {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if a, b := status("first-token"), status("second-token"); a != http.StatusOK || b != http.StatusUnauthorized {
		t.Fatalf("before the reload: first token %d, second %d; want 200, 401", a, b)
	}
	if err := os.WriteFile(tokenFile, []byte("second-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	reload <- struct{}{}
	testkit.WaitFor(t, time.Minute, "the rotated token the only one accepted", func() (bool, string) {
		a, b := status("first-token"), status("second-token")
		return a == http.StatusUnauthorized && b == http.StatusOK, fmt.Sprint(a, b)
	})
}
