package dbtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/tooling/pgtemp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"go.uber.org/goleak"
)

const (
	// containerImage is the image of the Docker fallback; it matches the
	// PostgreSQL major version of CI's local binaries.
	containerImage = "postgres:15-alpine"
	// pgtempTimeout and containerTimeout bound starting a server; the
	// container's includes pulling the image.
	pgtempTimeout    = 2 * time.Minute
	containerTimeout = 5 * time.Minute
	// stopTimeout bounds stopping a server.
	stopTimeout = 2 * time.Minute
	// adminMaxConns bounds the connections used to create and drop
	// databases.
	adminMaxConns = 4
)

// server is a PostgreSQL server the tests of a binary share.
type server struct {
	desc    string  // for messages, e.g. "pgtemp cluster on 127.0.0.1:41234"
	base    url.URL // connection URL; url swaps in the database
	admin   *pgxpool.Pool
	stop    func(context.Context) error // stops what startServer started; nil for an external server
	startup time.Duration
	seq     atomic.Uint64 // for database names

	// leakOptions make Main's leak check ignore goroutines that the
	// server's client library keeps for the life of the process.
	leakOptions []goleak.Option
}

// url returns the URL of database on the server.
func (s *server) url(database string) string {
	u := s.base
	u.Path = "/" + database
	u.RawPath = ""
	return u.String()
}

// close closes the admin pool and stops the server if dbtest started it.
func (s *server) close() error {
	s.admin.Close()
	if s.stop == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := s.stop(ctx); err != nil {
		return fmt.Errorf("stop %s: %w", s.desc, err)
	}
	return nil
}

// startServer picks and starts the server, as described in the package
// documentation.
func startServer() (*server, error) {
	if raw := os.Getenv(EnvDatabaseURL); raw != "" {
		srv, err := externalServer(raw)
		if err != nil {
			return nil, fmt.Errorf("dbtest: %s is set, but the server there is unusable (unset it to let dbtest start a server): %w", EnvDatabaseURL, err)
		}
		return srv, nil
	}
	srv, pgtempErr := pgtempServer()
	if pgtempErr == nil {
		return srv, nil
	}
	srv, containerErr := containerServer()
	if containerErr == nil {
		return srv, nil
	}
	return nil, fmt.Errorf(`dbtest: no PostgreSQL server for the tests. Tried, in order:
  1. %s: not set; set it to the postgres:// URL of a server where the tests may create databases
  2. local PostgreSQL binaries (pgtemp): %v
  3. Docker (testcontainers-go, %s): %v`,
		EnvDatabaseURL, indent(pgtempErr), containerImage, indent(containerErr))
}

// indent keeps a multi-line error readable inside the list of reasons.
func indent(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "\n     ")
}

func externalServer(raw string) (*server, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// Leave out the URL, which url.Error quotes, password and all.
		if uerr := (*url.Error)(nil); errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, fmt.Errorf("parse URL: %w", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, fmt.Errorf("want a postgres:// or postgresql:// URL, got scheme %q", u.Scheme)
	}
	return newServer("server at "+EnvDatabaseURL+" ("+u.Redacted()+")", *u, nil)
}

func pgtempServer() (*server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), pgtempTimeout)
	defer cancel()
	c, err := pgtemp.Start(ctx, pgtemp.Options{})
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(c.URL("postgres"))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("parse cluster URL: %w", err), c.Stop())
	}
	return newServer(fmt.Sprintf("pgtemp cluster on 127.0.0.1:%d", c.Port()), *u,
		func(context.Context) error { return c.Stop() })
}

func containerServer() (srv *server, err error) {
	// testcontainers-go panics in places when it finds no Docker.
	defer func() {
		if r := recover(); r != nil {
			srv, err = nil, fmt.Errorf("testcontainers-go panicked: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), containerTimeout)
	defer cancel()
	ctr, err := tcpostgres.Run(ctx, containerImage,
		testcontainers.WithLogger(tclog.NewNoopLogger()),
		testcontainers.WithCmdArgs("-c", "max_connections=200", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"),
		tcpostgres.BasicWaitStrategies(),
	)
	terminate := func(ctx context.Context) error {
		return testcontainers.TerminateContainer(ctr, testcontainers.StopContext(ctx))
	}
	if err != nil {
		return nil, errors.Join(err, terminate(ctx))
	}
	raw, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("connection string: %w", err), terminate(ctx))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("parse connection string: %w", err), terminate(ctx))
	}
	srv, err = newServer("container "+containerImage+" at "+u.Host, *u, terminate)
	if err != nil {
		return nil, err
	}
	srv.leakOptions = []goleak.Option{
		// The connection to the Ryuk reaper, and the Docker API client's
		// idle keep-alive connections.
		goleak.IgnoreAnyFunction("github.com/testcontainers/testcontainers-go.(*Reaper).connect.func1"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	}
	return srv, nil
}

// newServer opens the admin pool on base and checks that it works. On
// failure it stops the server with stop (if not nil).
func newServer(desc string, base url.URL, stop func(context.Context) error) (*server, error) {
	fail := func(err error) (*server, error) {
		if stop != nil {
			ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
			defer cancel()
			err = errors.Join(err, stop(ctx))
		}
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(base.String())
	if err != nil {
		return fail(fmt.Errorf("parse URL: %w", err))
	}
	cfg.MaxConns = adminMaxConns
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	admin, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fail(fmt.Errorf("connect to %s: %w", desc, err))
	}
	if err := admin.Ping(ctx); err != nil {
		admin.Close()
		return fail(fmt.Errorf("connect to %s: %w", desc, err))
	}
	return &server{desc: desc, base: base, admin: admin, stop: stop}, nil
}
