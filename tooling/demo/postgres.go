package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/drainer-io/drainer/tooling/pgtemp"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

type server struct {
	url  string
	stop func()
}

// startPostgres starts a throwaway Postgres from the local binaries, else in
// Docker.
func startPostgres(ctx context.Context, log *slog.Logger) (*server, error) {
	c, err := pgtemp.Start(ctx, pgtemp.Options{Logger: log})
	if err == nil {
		return &server{url: c.URL("postgres"), stop: func() { _ = c.Stop() }}, nil
	}
	localErr := err
	srv, err := startContainer(ctx)
	if err == nil {
		return srv, nil
	}
	return nil, fmt.Errorf("no Postgres for the demo:\n  local binaries: %v\n  Docker: %v\ninstall PostgreSQL (e.g. apt-get install postgresql) or start Docker", localErr, err)
}

func startContainer(ctx context.Context) (srv *server, err error) {
	defer func() {
		if r := recover(); r != nil {
			srv, err = nil, fmt.Errorf("testcontainers panicked: %v", r)
		}
	}()
	ctr, err := tcpostgres.Run(ctx, "postgres:15-alpine",
		testcontainers.WithLogger(tclog.NewNoopLogger()),
		tcpostgres.WithDatabase("postgres"), tcpostgres.WithUsername("postgres"), tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies())
	if err != nil {
		return nil, err
	}
	url, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		return nil, errors.Join(err)
	}
	return &server{url: url, stop: func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = testcontainers.TerminateContainer(ctr, testcontainers.StopContext(sctx))
	}}, nil
}
