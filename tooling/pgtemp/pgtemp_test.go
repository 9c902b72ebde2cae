package pgtemp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

// helperEnv makes the test binary act as a process that starts a cluster
// and then dies without stopping it (see TestSweepLeakedCluster).
const helperEnv = "PGTEMP_TEST_LEAK_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(leakHelper())
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtemp: goroutine leak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakHelper starts a cluster, reports "<dir> <port>" on stdout and waits
// to be killed.
func leakHelper() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%s %d\n", c.root, c.Port())
	time.Sleep(time.Minute)
	_ = c.Stop() // only reached if the test failed to kill us
	return 1
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func startCluster(t *testing.T, opts Options) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	begin := time.Now()
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("cluster on port %d started in %v", c.Port(), time.Since(begin).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return c
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func showSetting(t *testing.T, conn *pgx.Conn, name string) string {
	t.Helper()
	var v string
	if err := conn.QueryRow(t.Context(), "SELECT current_setting($1)", name).Scan(&v); err != nil {
		t.Fatalf("current_setting(%s): %v", name, err)
	}
	return v
}

func assertStopped(t *testing.T, root string, port, postmaster int) {
	t.Helper()
	if _, err := os.Stat(root); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cluster directory %s still exists (stat: %v)", root, err)
	}
	if conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second); err == nil {
		conn.Close()
		t.Errorf("port %d still accepts connections", port)
	}
	// pg_ctl stop --wait returns once postmaster.pid is gone, which is a
	// moment before the process has exited.
	for deadline := time.Now().Add(5 * time.Second); processAlive(postmaster); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("postmaster (pid %d) still running", postmaster)
			break
		}
	}
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	c := startCluster(t, Options{Logger: testLogger(t)})
	root, port := c.root, c.Port()
	postmaster, ok := postmasterPID(c.dataDir())
	if !ok {
		t.Fatal("no postmaster.pid")
	}

	url := c.URL("postgres")
	wantPrefix := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?", port)
	if !strings.HasPrefix(url, wantPrefix) || !strings.Contains(url, "sslmode=disable") {
		t.Errorf("URL = %q, want %q...sslmode=disable", url, wantPrefix)
	}

	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	var sum int
	if err := conn.QueryRow(t.Context(), "SELECT $1::int + 1", 41).Scan(&sum); err != nil || sum != 42 {
		t.Errorf("SELECT 41 + 1 = %d, %v", sum, err)
	}
	for name, want := range map[string]string{
		"fsync":              "off",
		"synchronous_commit": "off",
		"full_page_writes":   "off",
		"max_connections":    "200",
		"server_encoding":    "UTF8",
		"lc_collate":         "C",
		"listen_addresses":   "127.0.0.1",
	} {
		if got := showSetting(t, conn, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	conn.Close(t.Context())

	if os.Geteuid() == 0 {
		if uid := statOwner(t, c.dataDir()); uid == 0 {
			t.Errorf("data directory owned by root, want the unprivileged user %s", c.runAs)
		}
	}

	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	assertStopped(t, root, port, postmaster)
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func statOwner(t *testing.T, path string) uint32 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Uid
}

func TestDurableAndSettings(t *testing.T) {
	t.Parallel()
	c := startCluster(t, Options{
		Durable: true,
		Settings: map[string]string{
			"work_mem":         "8MB",
			"application_name": `it's a \ test`,
			"max_connections":  "50", // overrides pgtemp's default
		},
	})
	conn := connect(t, c.URL("postgres"))
	for name, want := range map[string]string{
		"fsync":            "on",
		"full_page_writes": "on",
		"work_mem":         "8MB",
		"max_connections":  "50",
	} {
		if got := showSetting(t, conn, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

func TestInvalidSettings(t *testing.T) {
	t.Parallel()
	for _, settings := range []map[string]string{
		{"port": "5433"},
		{"Listen_Addresses": "*"},
		{"unix_socket_directories": "/tmp"},
		{"work_mem = 1MB\nfsync": "off"},
		{"work_mem": "1MB\nfsync = on"},
		{"": "x"},
	} {
		c, err := Start(t.Context(), Options{Settings: settings})
		if err == nil {
			c.Stop()
			t.Errorf("Start with settings %q succeeded, want an error", settings)
			continue
		}
		if !strings.HasPrefix(err.Error(), "pgtemp: start: setting ") {
			t.Errorf("Start with settings %q: error %q, want a settings error", settings, err)
		}
	}
}

// privateTempDir points TMPDIR at a new directory that the cluster's user
// can use, so that a test can see what Start leaves there.
func privateTempDir(t *testing.T) string {
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("TMPDIR", dir)
	return dir
}

func TestStartFailureQuotesLogAndCleansUp(t *testing.T) {
	tmp := privateTempDir(t)
	c, err := Start(t.Context(), Options{Settings: map[string]string{"work_mem": "banana"}})
	if err == nil {
		c.Stop()
		t.Fatal("Start with work_mem=banana succeeded")
	}
	t.Log(err)
	for _, want := range []string{"pgtemp: start: pg_ctl start", "server log:", `invalid value for parameter "work_mem"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not contain %q", want)
		}
	}
	if errors.Is(err, errPortInUse) {
		t.Error("a configuration error was taken for a port clash")
	}
	left, _ := filepath.Glob(filepath.Join(tmp, dirPattern))
	if len(left) > 0 {
		t.Errorf("failed Start left %v behind", left)
	}
}

func TestStartCanceled(t *testing.T) {
	tmp := privateTempDir(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	c, err := Start(ctx, Options{})
	if err == nil {
		c.Stop()
		t.Fatal("Start with a canceled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Start with a canceled context: %v, want context.Canceled", err)
	}
	left, _ := filepath.Glob(filepath.Join(tmp, dirPattern))
	if len(left) > 0 {
		t.Errorf("canceled Start left %v behind", left)
	}
}

func TestConcurrentClusters(t *testing.T) {
	t.Parallel()
	const n = 3
	clusters := make([]*Cluster, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := Start(t.Context(), Options{})
			if err != nil {
				t.Errorf("Start: %v", err)
				return
			}
			clusters[i] = c
		})
	}
	wg.Wait()
	ports := map[int]bool{}
	for _, c := range clusters {
		if c == nil {
			continue
		}
		t.Cleanup(func() {
			if err := c.Stop(); err != nil {
				t.Errorf("Stop: %v", err)
			}
		})
		if ports[c.Port()] {
			t.Errorf("port %d used twice", c.Port())
		}
		ports[c.Port()] = true
		conn := connect(t, c.URL("postgres"))
		if err := conn.Ping(t.Context()); err != nil {
			t.Errorf("ping cluster on port %d: %v", c.Port(), err)
		}
	}
}

// TestStartServerPortTaken covers the retry on a port taken between
// choosing it and the server binding it.
func TestStartServerPortTaken(t *testing.T) {
	t.Parallel()
	c := startCluster(t, Options{})
	if err := stopServer(t.Context(), c.bins, c.runAs, c.dataDir(), "fast"); err != nil {
		t.Fatalf("stop server: %v", err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	err = c.startServer(t.Context(), busy)
	if !errors.Is(err, errPortInUse) {
		t.Fatalf("startServer on busy port %d: %v, want errPortInUse", busy, err)
	}
	if !strings.Contains(err.Error(), "server log:") {
		t.Errorf("error %q does not quote the server log", err)
	}

	if err := c.start(t.Context()); err != nil {
		t.Fatalf("start after port clash: %v", err)
	}
	if err := pingOnce(t.Context(), c.URL("postgres")); err != nil {
		t.Errorf("ping: %v", err)
	}
}

// TestSweepLeakedCluster kills a process that owns a running cluster and
// checks that the next Start stops and removes it. Both use a private
// TMPDIR, so that no other test (or test binary) sweeps the cluster first.
func TestSweepLeakedCluster(t *testing.T) {
	privateTempDir(t)
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("read helper output: %v", err)
	}
	var root string
	var port int
	if _, err := fmt.Sscanf(line, "%s %d", &root, &port); err != nil {
		t.Fatalf("parse helper output %q: %v", line, err)
	}
	postmaster, ok := postmasterPID(filepath.Join(root, dataSubdir))
	if !ok || !processAlive(postmaster) {
		t.Fatalf("helper's cluster in %s not running", root)
	}
	if err := pingOnce(t.Context(), fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", port)); err != nil {
		t.Fatalf("helper's cluster does not answer: %v", err)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill helper: %v", err)
	}
	_ = cmd.Wait()
	if !processAlive(postmaster) {
		t.Fatal("the cluster died with its owner; nothing left to sweep")
	}

	startCluster(t, Options{Logger: testLogger(t)}) // sweeps
	assertStopped(t, root, port, postmaster)
}

func TestSweepWithoutServer(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	mk := func(name, marker string, age time.Duration) string {
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if marker != "" {
			if err := os.WriteFile(filepath.Join(dir, markerFile), []byte(marker), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		old := time.Now().Add(-age)
		if err := os.Chtimes(dir, old, old); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	self := os.Getpid()
	alive := mk("drainer-pg-alive", fmt.Sprintf("%d %s\n", self, processStartTime(self)), time.Hour)
	reused := mk("drainer-pg-reused", fmt.Sprintf("%d not-my-start-time\n", self), 0)
	fresh := mk("drainer-pg-fresh", "", 0)
	stale := mk("drainer-pg-stale", "", time.Hour)
	other := mk("other-dir", "", time.Hour)

	sweep(t.Context(), testLogger(t), parent, binaries{})

	for dir, wantKept := range map[string]bool{alive: true, reused: false, fresh: true, stale: false, other: true} {
		_, err := os.Stat(dir)
		if kept := err == nil; kept != wantKept {
			t.Errorf("%s: kept = %v, want %v", filepath.Base(dir), kept, wantKept)
		}
	}
}

func TestTempParent(t *testing.T) {
	runAs, err := lookupRunUser()
	if err != nil {
		t.Fatal(err)
	}
	private := t.TempDir()
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", private)
	got, err := tempParent(runAs)
	if err != nil {
		t.Fatalf("tempParent: %v", err)
	}
	want := private
	if runAs != nil { // root: the postgres user cannot enter a 0700 root-owned directory
		want = "/tmp"
	}
	if got != want {
		t.Errorf("tempParent with TMPDIR=%s (mode 0700) = %q, want %q", private, got, want)
	}
}

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int // sign
	}{
		{"16", "15", 1}, {"9.6", "10", -1}, {"10", "9.6", 1}, {"15", "15", 0}, {"9.6", "9.5", 1}, {"x", "9", -1},
	} {
		got := compareVersions(tc.a, tc.b)
		if sign(got) != tc.want {
			t.Errorf("compareVersions(%q, %q) = %d, want sign %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

func TestFindBinaries(t *testing.T) {
	t.Parallel()
	b, err := findBinaries()
	if err != nil {
		t.Fatalf("findBinaries: %v", err)
	}
	for _, p := range []string{b.initdb, b.pgCtl, b.postgres} {
		if !filepath.IsAbs(p) || !isExecutable(p) {
			t.Errorf("%q is not an absolute path to an executable", p)
		}
	}
}
