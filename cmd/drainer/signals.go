package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// shutdownSignals catches SIGTERM and SIGINT from the first statement of
// main, before any slow startup (flag parsing, the config, the database),
// so that a signal sent to a process still starting (a rolling restart on a
// loaded machine) is never fatal: `drainer run` then exits 0 as soon as it
// can, having claimed nothing (docs/reference.md §3). A SIGHUP that comes
// before `run` listens for reloads is dropped: the config is read after it
// anyway. Commands that do not handle the signals themselves (ownsSignals)
// get the default behaviour back before they run, and a signal caught
// before that is raised again, so they die of it as they always did.
type shutdownSignals struct {
	ch   chan os.Signal
	done chan struct{} // closed at the first SIGTERM or SIGINT

	mu  sync.Mutex
	got os.Signal // the first SIGTERM or SIGINT
	hup bool      // a SIGHUP came
}

// shutdown is main's catcher; nil when execute runs without main (tests),
// where the commands install their own handlers as they start.
var shutdown *shutdownSignals

// catchShutdownSignals starts catching SIGTERM and SIGINT.
func catchShutdownSignals() *shutdownSignals {
	s := &shutdownSignals{ch: make(chan os.Signal, 2), done: make(chan struct{})}
	signal.Notify(s.ch, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		for sig := range s.ch {
			s.mu.Lock()
			if sig == syscall.SIGHUP {
				s.hup = true
			} else if s.got == nil {
				s.got = sig
				close(s.done)
			}
			s.mu.Unlock()
		}
	}()
	return s
}

// received returns the first signal caught, nil if none.
func (s *shutdownSignals) received() os.Signal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got
}

// release gives the signals their default behaviour back, re-raising one
// already caught (the process then dies of it, as without the catcher).
func (s *shutdownSignals) release() {
	signal.Stop(s.ch)
	s.mu.Lock()
	sig, hup := s.got, s.hup
	s.mu.Unlock()
	if sig == nil && hup {
		sig = syscall.SIGHUP
	}
	if sig, ok := sig.(syscall.Signal); ok {
		_ = syscall.Kill(os.Getpid(), sig)
		time.Sleep(time.Second) // the signal is delivered asynchronously
	}
}

// ownsSignals marks a command that stops cleanly on SIGTERM/SIGINT through
// shutdownContext.
const ownsSignals = "drainer/owns-signals"

// releaseUnlessOwned hands the signals back unless the command args name
// handles them itself.
func releaseUnlessOwned(root *cobra.Command, args []string) {
	if shutdown == nil {
		return
	}
	if cmd, _, err := root.Find(args); err == nil && cmd.Annotations[ownsSignals] != "" {
		return
	}
	shutdown.release()
}

// shutdownContext returns a context cancelled by SIGTERM or SIGINT,
// including one caught before the command started; log, when set, hears
// which signal arrived.
func shutdownContext(parent context.Context, log func(sig os.Signal)) (context.Context, context.CancelFunc) {
	if shutdown == nil {
		return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	}
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-shutdown.done:
			if log != nil {
				log(shutdown.received())
			}
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// testStartDelay is a test-only pause at the start of execute
// (DRAINER_TEST_START_DELAY, a duration): it plays a process that the
// machine starves of CPU while it starts, before any command has run.
func testStartDelay(stderr io.Writer) {
	v := os.Getenv("DRAINER_TEST_START_DELAY")
	if v == "" {
		return
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		fmt.Fprintf(stderr, "drainer: DRAINER_TEST_START_DELAY: %v\n", err)
		return
	}
	fmt.Fprintf(stderr, "drainer: test start delay of %s in force\n", d)
	time.Sleep(d)
}
