package pgtemp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Superuser is the name of the cluster's superuser; every local connection
// is trusted, so it needs no password.
const Superuser = "postgres"

const (
	// dirPattern names cluster directories under os.TempDir; the sweep for
	// leaked clusters relies on it.
	dirPattern = "drainer-pg-*"
	// Layout of a cluster directory.
	markerFile = "owner.pid"
	dataSubdir = "data"
	sockSubdir = "sock"
	logFile    = "server.log"

	// portAttempts bounds how often Start picks a new port when the one it
	// picked was taken before the server could bind it.
	portAttempts = 5
	// defaultStartTimeout applies to pg_ctl start when ctx has no deadline.
	defaultStartTimeout = time.Minute
	// stopTimeout bounds each attempt at stopping a server.
	stopTimeout = 30 * time.Second
	// logTailBytes is how much of the server log errors quote.
	logTailBytes = 2048
)

// reservedSettings are managed by pgtemp and may not be set in
// Options.Settings.
var reservedSettings = []string{"listen_addresses", "port", "unix_socket_directories"}

// Options configure [Start]. The zero value is a fast, non-durable cluster
// that logs nothing.
type Options struct {
	// Logger receives progress at debug level and problems during cleanup
	// at warn level. Nil discards.
	Logger *slog.Logger
	// Settings are extra postgresql.conf settings, applied after pgtemp's own
	// and so overriding them, e.g. {"log_statement": "all"}. listen_addresses,
	// port and unix_socket_directories are managed by pgtemp and rejected.
	Settings map[string]string
	// Durable keeps PostgreSQL's crash safety. When false (the default)
	// fsync, synchronous_commit and full_page_writes are off: much faster,
	// and a throwaway cluster loses nothing that matters in a crash.
	Durable bool
}

// Cluster is a running throwaway PostgreSQL cluster. Its methods are safe
// for concurrent use.
type Cluster struct {
	logger *slog.Logger
	bins   binaries
	runAs  *runUser
	root   string // the drainer-pg-* directory holding everything below
	port   int

	stopOnce sync.Once
	stopErr  error
}

// Start creates, starts and pings a new cluster. It first sweeps clusters
// leaked by processes that no longer exist. The returned cluster must be
// stopped with [Cluster.Stop].
//
// ctx bounds the startup only; the cluster keeps running until Stop.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conf, err := configLines(opts)
	if err != nil {
		return nil, fmt.Errorf("pgtemp: start: %w", err)
	}
	bins, err := findBinaries()
	if err != nil {
		return nil, fmt.Errorf("pgtemp: start: %w", err)
	}
	runAs, err := lookupRunUser()
	if err != nil {
		return nil, fmt.Errorf("pgtemp: start: %w", err)
	}
	parent, err := tempParent(runAs)
	if err != nil {
		return nil, fmt.Errorf("pgtemp: start: %w", err)
	}

	sweep(ctx, logger, parent, bins)

	begin := time.Now()
	c := &Cluster{logger: logger, bins: bins, runAs: runAs}
	err = c.create(ctx, parent, conf)
	if err == nil {
		err = c.start(ctx)
	}
	if err != nil {
		err = fmt.Errorf("pgtemp: start: %w", err)
		if c.root != "" {
			// Stop whatever got started; what cannot be removed now is
			// left for a later sweep.
			err = errors.Join(err, c.Stop())
		}
		return nil, err
	}
	logger.Debug("pgtemp: cluster ready", "dir", c.root, "port", c.port, "duration", time.Since(begin))
	return c, nil
}

// tempParent returns the directory to create the cluster directory in:
// os.TempDir(), or /tmp where runAs cannot reach that (TMPDIR=/root/tmp
// for a root process, say).
func tempParent(runAs *runUser) (string, error) {
	var errs []error
	for _, dir := range slices.Compact([]string{os.TempDir(), "/tmp"}) {
		err := runAs.checkTraversable(dir)
		if err == nil {
			return dir, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("no temporary directory that %s can reach, set TMPDIR to one: %w", runAs, errors.Join(errs...))
}

// URL returns a connection URL for database on the cluster, connecting as
// [Superuser] over TCP without TLS.
func (c *Cluster) URL(database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(Superuser),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Port returns the TCP port the cluster listens on at 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// Stop shuts the server down (pg_ctl stop -m fast, falling back to
// immediate) and removes the cluster directory. Calling it again returns the
// first call's result. If the server cannot be stopped the directory is
// kept, so that a later [Start] can sweep it once this process has exited.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		if err := c.stop(); err != nil {
			c.stopErr = fmt.Errorf("pgtemp: stop: %w", err)
		}
	})
	return c.stopErr
}

func (c *Cluster) stop() error {
	if err := c.stopServer("fast"); err != nil {
		c.logger.Warn("pgtemp: fast shutdown failed, trying immediate", "dir", c.root, "err", err)
		if err2 := c.stopServer("immediate"); err2 != nil {
			return errors.Join(err, err2)
		}
	}
	if err := os.RemoveAll(c.root); err != nil {
		return fmt.Errorf("remove cluster directory: %w", err)
	}
	c.logger.Debug("pgtemp: cluster stopped", "dir", c.root, "port", c.port)
	return nil
}

func (c *Cluster) stopServer(mode string) error {
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	return stopServer(ctx, c.bins, c.runAs, c.dataDir(), mode)
}

func (c *Cluster) dataDir() string { return filepath.Join(c.root, dataSubdir) }
func (c *Cluster) sockDir() string { return filepath.Join(c.root, sockSubdir) }
func (c *Cluster) logPath() string { return filepath.Join(c.root, logFile) }

// create makes the cluster directory, its owner marker and the database
// cluster itself.
func (c *Cluster) create(ctx context.Context, parent string, conf []string) error {
	root, err := os.MkdirTemp(parent, dirPattern)
	if err != nil {
		return fmt.Errorf("create cluster directory: %w", err)
	}
	c.root = root
	if err := writeMarker(root); err != nil {
		return err
	}
	if err := os.Mkdir(c.sockDir(), 0o700); err != nil {
		return fmt.Errorf("create socket directory: %w", err)
	}
	for _, dir := range []string{root, c.sockDir()} {
		if err := c.runAs.chown(dir); err != nil {
			return fmt.Errorf("hand %s to %s: %w", dir, c.runAs, err)
		}
	}

	begin := time.Now()
	out, err := c.command(ctx, c.bins.initdb,
		"--pgdata="+c.dataDir(),
		"--username="+Superuser,
		"--auth=trust",
		"--encoding=UTF8",
		"--locale=C",
		"--no-sync",
	).CombinedOutput()
	if err != nil {
		return fmt.Errorf("initdb: %w: %s", err, tail(out, logTailBytes))
	}
	c.logger.Debug("pgtemp: initdb done", "dir", c.root, "run_as", c.runAs.String(), "duration", time.Since(begin))

	conf = append([]string{"", "# Added by drainer's pgtemp.",
		"listen_addresses = '127.0.0.1'",
		"unix_socket_directories = " + quoteConf(c.sockDir()),
	}, conf...)
	f, err := os.OpenFile(filepath.Join(c.dataDir(), "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("write postgresql.conf: %w", err)
	}
	_, err = io.WriteString(f, strings.Join(conf, "\n")+"\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write postgresql.conf: %w", err)
	}
	return nil
}

// start starts the server on a free port, retrying with another port when
// the chosen one was taken in the meantime, and waits until it accepts
// connections.
func (c *Cluster) start(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		err = c.startServer(ctx, port)
		if err == nil {
			break
		}
		if !errors.Is(err, errPortInUse) || attempt == portAttempts {
			return err
		}
		c.logger.Debug("pgtemp: port taken, retrying", "port", port, "attempt", attempt)
	}
	if err := c.ping(ctx); err != nil {
		logTail, _ := readTail(c.logPath(), logTailBytes)
		return fmt.Errorf("ping: %w; server log:\n%s", err, logTail)
	}
	return nil
}

// errPortInUse marks a start that failed because the port was taken.
var errPortInUse = errors.New("port already in use")

// startServer runs pg_ctl start on port. Its error wraps errPortInUse when
// the server could not bind the port.
func (c *Cluster) startServer(ctx context.Context, port int) error {
	offset := int64(0)
	if fi, err := os.Stat(c.logPath()); err == nil {
		offset = fi.Size() // only quote what this attempt logged
	}
	c.port = port
	out, err := c.command(ctx, c.bins.pgCtl, "start",
		"--pgdata="+c.dataDir(),
		"--log="+c.logPath(),
		"--options=-p "+strconv.Itoa(port),
		"--wait",
		"--timeout="+waitSeconds(ctx, defaultStartTimeout),
		"--silent",
	).CombinedOutput()
	if err == nil {
		return nil
	}
	logTail := readLogFrom(c.logPath(), offset)
	err = fmt.Errorf("pg_ctl start on port %d: %w: %s; server log:\n%s", port, err, strings.TrimSpace(string(out)), logTail)
	if strings.Contains(logTail, "could not create any TCP/IP sockets") || strings.Contains(logTail, "Address already in use") {
		err = fmt.Errorf("%w: %w", errPortInUse, err)
	}
	// pg_ctl may have given up (ctx, timeout) on a server that is still
	// starting; make sure nothing runs on behind our back.
	if serr := c.stopServer("immediate"); serr != nil {
		err = errors.Join(err, serr)
	}
	return err
}

// ping connects to the new server until that works or ctx ends. After
// pg_ctl --wait it normally works the first time.
func (c *Cluster) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		err := pingOnce(ctx, c.URL("postgres"))
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func pingOnce(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.Ping(ctx)
}

// command prepares a PostgreSQL program to run as the cluster's user.
func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := newCommand(ctx, c.runAs, name, args...)
	cmd.Dir = c.root
	return cmd
}

func newCommand(ctx context.Context, runAs *runUser, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = childEnv()
	cmd.WaitDelay = 5 * time.Second
	runAs.apply(cmd)
	return cmd
}

// childEnv is the environment minus PG* variables, which would otherwise
// change what initdb, pg_ctl and the server do (PGPORT, PGDATA, ...).
func childEnv() []string {
	env := os.Environ()
	return slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PG") })
}

// stopServer stops the server of dataDir, if one is running, with pg_ctl
// stop -m mode. A server that is gone already counts as stopped.
func stopServer(ctx context.Context, bins binaries, runAs *runUser, dataDir, mode string) error {
	pid, ok := postmasterPID(dataDir)
	if !ok || !processAlive(pid) {
		return nil
	}
	cmd := newCommand(ctx, runAs, bins.pgCtl, "stop",
		"--pgdata="+dataDir,
		"--mode="+mode,
		"--wait",
		"--timeout="+waitSeconds(ctx, stopTimeout),
		"--silent",
	)
	cmd.Dir = filepath.Dir(dataDir)
	out, err := cmd.CombinedOutput()
	if err != nil && processAlive(pid) {
		return fmt.Errorf("pg_ctl stop -m %s: %w: %s", mode, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// waitSeconds renders the time left until ctx's deadline, or def if it
// has none, as a pg_ctl --timeout value.
func waitSeconds(ctx context.Context, def time.Duration) string {
	if deadline, ok := ctx.Deadline(); ok {
		def = time.Until(deadline)
	}
	return strconv.Itoa(max(1, int(math.Ceil(def.Seconds()))))
}

// postmasterPID reads the server's pid from dataDir/postmaster.pid.
func postmasterPID(dataDir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	return pid, err == nil && pid > 0
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	return port, nil
}

var settingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

// configLines renders the postgresql.conf lines for opts, pgtemp's defaults
// first so that Options.Settings override them.
func configLines(opts Options) ([]string, error) {
	lines := []string{"max_connections = 200"}
	if !opts.Durable {
		lines = append(lines, "fsync = off", "synchronous_commit = off", "full_page_writes = off")
	}
	for _, name := range slices.Sorted(maps.Keys(opts.Settings)) {
		value := opts.Settings[name]
		switch {
		case !settingName.MatchString(name):
			return nil, fmt.Errorf("setting %q: invalid name", name)
		case slices.Contains(reservedSettings, strings.ToLower(name)):
			return nil, fmt.Errorf("setting %q: managed by pgtemp", name)
		case strings.ContainsAny(value, "\x00\n\r"):
			return nil, fmt.Errorf("setting %q: value contains a line break or NUL", name)
		}
		lines = append(lines, name+" = "+quoteConf(value))
	}
	return lines, nil
}

// quoteConf quotes s as a postgresql.conf string value.
func quoteConf(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// tail returns the last n bytes of b, trimmed.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

// readTail returns the last n bytes of the file at path.
func readTail(path string, n int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.NewSectionReader(f, max(0, fi.Size()-n), n))
	return tail(b, int(n)), err
}

// readLogFrom returns at most logTailBytes of what the file at path holds
// past offset, or a note saying why it cannot.
func readLogFrom(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, offset, 1<<20))
	if err != nil {
		return fmt.Sprintf("(reading server log: %v)", err)
	}
	if s := tail(b, logTailBytes); s != "" {
		return s
	}
	return "(empty)"
}
