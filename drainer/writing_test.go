package drainer

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// TestWritingLastsUntilItsNews: Engine.Writing tells nothing while the row
// is being dispatched, and, once its completion is being written, a
// channel that stays open until the write ended and its news was told to
// Config.Settled: a gateway call woken by the row's notification meanwhile
// waits for the news instead of reading the row. The write is held here by
// a lock on the row.
func TestWritingLastsUntilItsNews(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	h := newHoldingAdapter()
	var told settledKeys
	e := startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": h}, &Route{Tool: "t", Announce: true}),
		Config{Workers: 1, PollOnly: true, PollInterval: time.Hour, Settled: told.tell})
	// The claim loop's first claim ran; with nothing to wake it, it sleeps
	// for the poll, and the row is Lease's.
	testkit.WaitFor(t, 30*time.Second, "the claim loop's first claim", func() (bool, string) { return claims(t, e) >= 1, "" })
	ctx := context.Background()
	key := enqueueN(t, pool, "run-w", "t", 1)[0]
	var seq int64
	if err := pool.QueryRow(ctx, "SELECT seq FROM "+storetest.Schema+".outbox WHERE key = $1", key).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if !take(e, key) {
		t.Fatalf("take(%s) = false; want the row taken", key)
	}
	h.expectStarted(t, key)
	if ch := e.Writing(seq); ch != nil {
		t.Fatal("Writing during the dispatch: a channel; want nil (no completion is being written)")
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+storetest.Schema+".queue WHERE seq = $1 FOR UPDATE", seq); err != nil {
		t.Fatal(err)
	}
	close(h.proceed)
	var written <-chan struct{}
	testkit.WaitFor(t, 30*time.Second, "the completion being written", func() (bool, string) {
		written = e.Writing(seq)
		return written != nil, ""
	})
	select {
	case <-written:
		t.Fatal("the write's channel closed while the row's lock held the write back")
	default:
	}
	if early := told.list(); len(early) != 0 {
		t.Fatalf("told %v while the write was held back; want nothing yet", early)
	}

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-written:
	case <-time.After(30 * time.Second):
		t.Fatal("the write's channel still open 30s after the lock was released")
	}
	if got := told.list(); !slices.Equal(got, []string{key}) {
		t.Fatalf("told %v when the write's channel closed; want the row's news first (%s)", got, key)
	}
	if e.Writing(seq) != nil {
		t.Fatal("Writing after the write ended: a channel; want nil")
	}
}
