package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

// EnvDatabaseURL names the environment variable that points dbtest at an
// existing server instead of starting one.
const EnvDatabaseURL = "DRAINER_TEST_DATABASE_URL"

// opTimeout bounds creating or dropping one database.
const opTimeout = 30 * time.Second

// shared is the server the test binary's tests share, started on first use.
// It is the package's only global state.
var shared struct {
	mainRunning atomic.Bool // Main is running, so the server will be stopped

	once sync.Once
	srv  *server
	err  error
}

// errShutDown is returned to callers arriving after Main stopped the server.
var errShutDown = errors.New("dbtest: server already shut down; is a goroutine outliving its test?")

// Main runs the tests of a package that uses dbtest; call it from TestMain.
// After the tests it stops the shared server (if the binary started one)
// and, if the tests passed, looks for leaked goroutines like
// goleak.VerifyTestMain, ignoring those known to belong to the server's
// client libraries plus any matched by opts. It exits the process with a
// non-zero code if tests failed, the server could not be stopped or
// goroutines leaked.
//
// An unclosed pgxpool.Pool shows up as a leaked
// github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck goroutine.
// Close the pool; where code under test owns a pool it cannot close, pass
// goleak.IgnoreTopFunction with that name.
func Main(m *testing.M, opts ...goleak.Option) {
	shared.mainRunning.Store(true)
	code := m.Run()

	// Waits for a start still in progress (in a goroutine that outlived its
	// test) and makes sure that no later call starts another server.
	shared.once.Do(func() { shared.err = errShutDown })
	if srv := shared.srv; srv != nil {
		if err := srv.close(); err != nil {
			fmt.Fprintf(os.Stderr, "dbtest: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}

	if code == 0 {
		var ignore []goleak.Option
		if shared.srv != nil {
			ignore = shared.srv.leakOptions
		}
		if err := goleak.Find(append(ignore, opts...)...); err != nil {
			fmt.Fprintf(os.Stderr, "dbtest: goroutines leaked after all tests passed: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// NewDatabase creates a new, empty database on the shared server and
// returns its URL. The database is dropped, with any connections still open
// to it, when t's cleanups run; close pools with t.Cleanup (registered after
// this call) or defer so that they go first. It is safe for parallel tests.
func NewDatabase(t testing.TB) string {
	t.Helper()
	srv := sharedServer(t)
	name := srv.newDatabaseName()
	quoted := pgx.Identifier{name}.Sanitize()

	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if _, err := srv.admin.Exec(ctx, "CREATE DATABASE "+quoted); err != nil {
		t.Fatalf("dbtest: create database %s on %s: %v", name, srv.desc, err)
	}
	t.Cleanup(func() {
		// Not t.Context(): it is canceled before cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if _, err := srv.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+quoted+" WITH (FORCE)"); err != nil {
			t.Errorf("dbtest: drop database %s: %v", name, err)
		}
	})
	return srv.url(name)
}

// ServerURL returns the URL of the existing database named database on the
// shared server, connecting as the same role as [NewDatabase]'s URLs. It is
// for tests that need to reach a second database or the server's
// maintenance database ("postgres").
func ServerURL(t testing.TB, database string) string {
	t.Helper()
	return sharedServer(t).url(database)
}

// sharedServer returns the shared server, choosing and starting it on the
// first call, or fails t.
func sharedServer(t testing.TB) *server {
	t.Helper()
	if !shared.mainRunning.Load() {
		t.Fatal("dbtest: the package's TestMain must call dbtest.Main(m), which stops the shared server after the tests")
	}
	started := false
	shared.once.Do(func() {
		started = true
		begin := time.Now()
		shared.srv, shared.err = startServer()
		if shared.err == nil {
			shared.srv.startup = time.Since(begin)
		}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	if started {
		t.Logf("dbtest: using %s (ready in %v)", shared.srv.desc, shared.srv.startup.Round(time.Millisecond))
	}
	return shared.srv
}

// newDatabaseName returns a database name unique on the server: pid and
// counter separate the databases of one machine's test binaries, the random
// part those of machines sharing a server.
func (s *server) newDatabaseName() string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails
	return fmt.Sprintf("t_%d_%d_%s", os.Getpid(), s.seq.Add(1), hex.EncodeToString(b[:]))
}
