package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/drainer-io/drainer/migrations"
)

// flakyStarter fails its first fails calls with err, then starts.
type flakyStarter struct {
	fails, calls int
	err          error
}

func (f *flakyStarter) Start(context.Context) error {
	f.calls++
	if f.calls <= f.fails {
		return f.err
	}
	return nil
}

// TestStartEngineWaitsForTheDatabase: an engine whose first reads fail (the
// database restarted between the schema check and the engine's start) is
// started again until it runs, instead of ending the process; a schema that
// is not ready ends it at once, as does a cancelled context.
func TestStartEngineWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()

	down := &flakyStarter{fails: 3, err: errors.New("read schema version: FATAL: terminating connection due to administrator command (SQLSTATE 57P01)")}
	if err := startEngine(ctx, down, time.Millisecond, log); err != nil || down.calls != 4 {
		t.Fatalf("database down for 3 starts: err %v after %d calls; want started on the 4th", err, down.calls)
	}

	notReady := &flakyStarter{fails: 100, err: fmt.Errorf("%w: schema \"drainer\" is at version 3", migrations.ErrSchemaNotReady)}
	if err := startEngine(ctx, notReady, time.Millisecond, log); !errors.Is(err, migrations.ErrSchemaNotReady) || notReady.calls != 1 {
		t.Fatalf("schema not ready: err %v after %d calls; want it returned at once", err, notReady.calls)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	forever := &flakyStarter{fails: 1 << 30, err: errors.New("connection refused")}
	if err := startEngine(cctx, forever, time.Millisecond, log); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled while the database is down: err %v; want context.Canceled", err)
	}
}
