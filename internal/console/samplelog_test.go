package console

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/internal/fleet"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5/pgxpool"
)

// downFleet is a fleet whose published backlogs cannot be read while down
// is set, as when the coordination database is unreachable.
type downFleet struct {
	mu   sync.Mutex
	down bool
}

func (f *downFleet) Databases() []string { return []string{"a"} }

func (f *downFleet) Backlogs() ([]fleet.Backlog, time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, time.Time{}, errors.New("dial tcp: connection refused")
	}
	return nil, time.Now(), nil
}

func (f *downFleet) Pool(string) (*pgxpool.Pool, error) { return nil, errors.New("no pool") }

// TestSampleFailuresLogOncePerMinute: five minutes of failed samples, one
// every two seconds on an injected clock, log one line when they begin
// and one a minute after, and one line when a sample works again; a
// failure after that is a new outage, logged at once.
func TestSampleFailuresLogOncePerMinute(t *testing.T) {
	var buf bytes.Buffer
	f := &downFleet{down: true}
	srv, err := New(Config{Addr: "127.0.0.1:0", Fleet: f, Store: store.MustNew(""),
		Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	srv.stats.fails.now = func() time.Time { return clock }
	lines := func(s string) int { return strings.Count(buf.String(), s) }
	ctx := context.Background()
	for i := 0; i < 150; i++ {
		if srv.stats.sample(ctx) {
			t.Fatal("a sample of an unreachable fleet worked")
		}
		clock = clock.Add(DefaultSampleEvery)
	}
	if n := lines("level=WARN"); n != 5 {
		t.Errorf("five minutes of failed samples logged %d lines, want 5 (one a minute):\n%s", n, buf.String())
	}
	if n := lines("failed_since_last_line=30"); n != 4 {
		t.Errorf("the lines after the first should each count 30 failures, %d do:\n%s", n, buf.String())
	}
	f.mu.Lock()
	f.down = false
	f.mu.Unlock()
	for range 3 {
		if !srv.stats.sample(ctx) {
			t.Fatalf("a sample failed once the fleet answered:\n%s", buf.String())
		}
		clock = clock.Add(DefaultSampleEvery)
	}
	if n := lines("backlog sample works again"); n != 1 || !strings.Contains(buf.String(), "failing_for=5m0s") {
		t.Errorf("the end of the failures logged %d lines, want 1 saying 5m0s:\n%s", n, buf.String())
	}
	f.mu.Lock()
	f.down = true
	f.mu.Unlock()
	srv.stats.sample(ctx)
	if n := lines("level=WARN"); n != 6 {
		t.Errorf("a new failure after a working sample logged %d lines in all, want 6:\n%s", n, buf.String())
	}
}
