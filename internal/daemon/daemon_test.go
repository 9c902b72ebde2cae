package daemon

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// TestNoPasswordInLogs: with the database unreachable the daemon retries and
// logs clearly, and neither its logs nor its error show the password.
func TestNoPasswordInLogs(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there now
	const password = "pw-s3cr3t-value"
	cfg, err := config.Parse("c.yaml", []byte("adapters:\n  p: {type: http, url: \"http://127.0.0.1:1/{tool_name}\"}\nroutes:\n  t: {adapter: p}\n"), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var logs testkit.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = Run(ctx, Options{
		Config:      cfg,
		DatabaseURL: "postgres://app:" + password + "@127.0.0.1:" + strconv.Itoa(port) + "/app?sslmode=disable",
		MetricsAddr: "127.0.0.1:0",
		Logger:      slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatalf("an unreachable database at start is retried until shutdown, not an error: %v", err)
	}
	out := logs.String()
	if !strings.Contains(out, "database unreachable") || !strings.Contains(out, strconv.Itoa(port)) {
		t.Fatalf("no clear log of the unreachable database:\n%s", out)
	}
	if strings.Contains(out, password) {
		t.Fatalf("the password reached the logs:\n%s", out)
	}
	err = Run(context.Background(), Options{Config: cfg, DatabaseURL: "postgres://app:" + password + "@[::1", MetricsAddr: "127.0.0.1:0"})
	if err == nil || strings.Contains(err.Error(), password) {
		t.Fatalf("bad URL error %v must exist and not show the password", err)
	}
}
