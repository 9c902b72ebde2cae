//go:build unix

package pgtemp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Fault injection for tests that need the database to go away and come
// back: a restart (every connection is closed, the server is unreachable
// for a while, then answers again on the same port) and a stall (the server
// process tree is frozen with SIGSTOP, as during a failover or a long
// stop-the-world pause: connections stay open but nothing answers).

const (
	// restartPortWait bounds how long Startup waits for the port to be
	// released by the server that has just shut down.
	restartPortWait = 10 * time.Second
	// pauseWait bounds how long Pause waits for each process to stop.
	pauseWait = 10 * time.Second
)

// Shutdown stops the server with a fast shutdown (open transactions are
// rolled back and every connection is closed), keeping the cluster
// directory, its data and its port: [Cluster.Startup] starts it again and
// [Cluster.Stop] still removes everything. A server that is already down
// counts as shut down. A paused server is resumed first.
//
// Shutdown, Startup, Restart, Pause and Resume must not be called
// concurrently with each other or with Stop; URL and Port may.
func (c *Cluster) Shutdown(ctx context.Context) error {
	if err := c.Resume(); err != nil {
		return fmt.Errorf("pgtemp: shutdown: %w", err)
	}
	if err := stopServer(ctx, c.bins, c.runAs, c.dataDir(), "fast"); err != nil {
		return fmt.Errorf("pgtemp: shutdown: %w", err)
	}
	c.logger.Debug("pgtemp: server shut down", "dir", c.root, "port", c.port)
	return nil
}

// Startup starts the server of a cluster that was shut down, on the same
// port as before, and waits until it accepts connections. While the port is
// still held (the previous server is exiting) it retries for a few seconds;
// if another process took the port, it fails with an error saying so.
func (c *Cluster) Startup(ctx context.Context) error {
	if pid, ok := postmasterPID(c.dataDir()); ok && processAlive(pid) {
		return fmt.Errorf("pgtemp: startup: the server is already running (pid %d)", pid)
	}
	begin := time.Now()
	for {
		err := c.startOnPort(ctx, c.port)
		if err == nil {
			break
		}
		if !errors.Is(err, errPortInUse) || time.Since(begin) > restartPortWait {
			return fmt.Errorf("pgtemp: startup: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtemp: startup: %w", errors.Join(err, ctx.Err()))
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := c.ping(ctx); err != nil {
		logTail, _ := readTail(c.logPath(), logTailBytes)
		return fmt.Errorf("pgtemp: startup: ping: %w; server log:\n%s", err, logTail)
	}
	c.logger.Debug("pgtemp: server started again", "dir", c.root, "port", c.port, "duration", time.Since(begin))
	return nil
}

// Restart is Shutdown followed by Startup: every connection is closed and
// the server answers again on the same port, with the same data.
func (c *Cluster) Restart(ctx context.Context) error {
	if err := c.Shutdown(ctx); err != nil {
		return err
	}
	return c.Startup(ctx)
}

// startOnPort runs pg_ctl start on port, like startServer but without
// changing c.port (which URL and Port read concurrently). Its error wraps
// errPortInUse when the server could not bind the port.
func (c *Cluster) startOnPort(ctx context.Context, port int) error {
	offset := int64(0)
	if fi, err := os.Stat(c.logPath()); err == nil {
		offset = fi.Size()
	}
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
	if serr := c.stopServer("immediate"); serr != nil {
		err = errors.Join(err, serr)
	}
	return err
}

// Pause freezes the server: it sends SIGSTOP to the postmaster and then to
// every process descending from it (backends, background workers, the
// checkpointer and the other auxiliary processes), and returns once all of
// them are stopped. Clients keep their connections, and new TCP connections
// are still accepted by the kernel, but nothing is answered until
// [Cluster.Resume]: what a client sees of a failover in progress or of a
// server stalled by its host.
//
// Signalling the postmaster's process group would not do: PostgreSQL makes
// every child of the postmaster the leader of a session of its own. The
// descendants are found through /proc, so Pause needs Linux (or another
// system with a Linux-style /proc); elsewhere it returns an error.
//
// A paused cluster must be resumed before Stop, which otherwise waits for
// its shutdown timeouts and leaves the directory behind. Shutdown and
// Restart resume it themselves.
func (c *Cluster) Pause() error {
	pm, ok := postmasterPID(c.dataDir())
	if !ok || !processAlive(pm) {
		return errors.New("pgtemp: pause: the server is not running")
	}
	// The postmaster first: once it is stopped it starts no new process,
	// so the set of descendants can only shrink.
	if err := stopAndWait([]int{pm}); err != nil {
		return fmt.Errorf("pgtemp: pause: %w", errors.Join(err, c.Resume()))
	}
	stopped := map[int]bool{pm: true}
	for {
		kids, err := descendants(pm)
		if err != nil {
			return fmt.Errorf("pgtemp: pause: %w", errors.Join(err, c.Resume()))
		}
		kids = slices.DeleteFunc(kids, func(pid int) bool { return stopped[pid] })
		if len(kids) == 0 {
			break
		}
		// A child that was running may have started a process of its own
		// before it stopped: look again until nothing new turns up.
		for _, pid := range kids {
			stopped[pid] = true
		}
		if err := stopAndWait(kids); err != nil {
			return fmt.Errorf("pgtemp: pause: %w", errors.Join(err, c.Resume()))
		}
	}
	c.logger.Debug("pgtemp: server paused", "dir", c.root, "port", c.port, "processes", len(stopped))
	return nil
}

// Resume undoes [Cluster.Pause]: it sends SIGCONT to every process
// descending from the postmaster, then to the postmaster. Resuming a server
// that is not paused, or not running, does nothing.
func (c *Cluster) Resume() error {
	pm, ok := postmasterPID(c.dataDir())
	if !ok || !processAlive(pm) {
		return nil
	}
	kids, err := descendants(pm)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	stopped := 0
	for _, pid := range append(kids, pm) {
		if st := procStat(pid); len(st) > 0 && (st[0] == "T" || st[0] == "t") {
			stopped++
		}
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("SIGCONT to pid %d: %w", pid, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pgtemp: resume: %w", err)
	}
	if stopped > 0 {
		c.logger.Debug("pgtemp: server resumed", "dir", c.root, "port", c.port, "processes", stopped)
	}
	return nil
}

// stopAndWait sends SIGSTOP to pids and waits until each is stopped or gone.
func stopAndWait(pids []int) error {
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("SIGSTOP to pid %d: %w", pid, err)
		}
	}
	deadline := time.Now().Add(pauseWait)
	for _, pid := range pids {
		for !stoppedOrGone(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("pid %d did not stop within %v after SIGSTOP", pid, pauseWait)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

// stoppedOrGone reports whether process pid is stopped by a signal, a
// zombie, or no longer exists, according to /proc/<pid>/stat.
func stoppedOrGone(pid int) bool {
	fields := procStat(pid)
	if len(fields) == 0 {
		return true
	}
	switch fields[0] {
	case "T", "t", "Z", "X", "x":
		return true
	}
	return false
}

// descendants returns the pids of every live process descending from pid,
// children before grandchildren, read from /proc.
func descendants(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return nil, fmt.Errorf("list processes: no Linux-style /proc: %w", err)
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fields := procStat(p)
		const ppidField = 4 - 3 // procStat()[0] is field 3
		if len(fields) <= ppidField {
			continue // gone since the listing
		}
		ppid, err := strconv.Atoi(fields[ppidField])
		if err != nil {
			return nil, fmt.Errorf("parse %s: parent pid %q", filepath.Join("/proc", e.Name(), "stat"), fields[ppidField])
		}
		children[ppid] = append(children[ppid], p)
	}
	out := slices.Clone(children[pid])
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out, nil
}
