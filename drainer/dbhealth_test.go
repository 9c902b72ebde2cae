package drainer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
)

// TestDatabaseOutageIsTwoLines: while the database cannot be reached, the
// engine says so once ("database unreachable", ERROR) and once when it is
// back ("database back", with how long it was down); meanwhile each
// subsystem logs its own failure at most once. Rows enqueued before and
// during the outage drain once it is over.
func TestDatabaseOutageIsTwoLines(t *testing.T) {
	t.Parallel()
	good := newPool(t)
	var s severable
	var logs testkit.Buffer
	ok := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success}
	})
	startEngine(t, s.pool(t, good), testRouting(t, map[string]dispatch.Adapter{"t": ok}, &Route{Tool: "t"}), Config{
		Workers: 4, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Metrics: NewMetrics(prometheus.NewRegistry(), "test"),
		// Every periodic subsystem runs many times during the outage.
		RotateInterval: 100 * time.Millisecond, SnapshotInterval: 100 * time.Millisecond,
	})
	enqueueN(t, good, "before", "t", 3)
	testkit.WaitFor(t, 20*time.Second, "the first rows drained", func() (bool, string) {
		return countByStatus(t, good)["succeeded"] == 3, ""
	})

	// A statement that timed out on a loaded machine is an outage of its
	// own, logged the same way: the one judged here is the one the sever
	// begins, from its first line to the line that ends it.
	testkit.WaitFor(t, 30*time.Second, "any earlier outage over", func() (bool, string) {
		l := logs.String()
		return strings.Count(l, "database unreachable") == strings.Count(l, "database back"), l
	})
	mark := len(logs.String())
	s.sever()
	enqueueN(t, good, "during", "t", 3)
	testkit.WaitFor(t, 20*time.Second, "the outage noticed", func() (bool, string) {
		return strings.Contains(logs.String()[mark:], "database unreachable"), ""
	})
	time.Sleep(2 * time.Second) // every subsystem fails again and again
	restoredAt := time.Now()
	s.restore()
	testkit.WaitFor(t, 30*time.Second, "the rows of the outage drained", func() (bool, string) {
		return countByStatus(t, good)["succeeded"] == 6, ""
	})
	testkit.WaitFor(t, 10*time.Second, "the end of the outage logged", func() (bool, string) {
		return strings.Contains(logs.String()[mark:], "database back"), ""
	})

	// The outage judged is the one the sever began: the lines after the
	// last "database back" logged before the restore (a statement that
	// timed out on a loaded machine just before the sever is an outage of
	// its own, ended before it), up to the first logged after it.
	down, back := 0, 0
	perMessage := map[string]int{}
	outage := logs.String()[mark:]
	sc := bufio.NewScanner(strings.NewReader(outage))
	for back == 0 && sc.Scan() {
		var line struct {
			Time                  time.Time
			Level, Msg, Subsystem string
			DownFor               time.Duration `json:"down_for"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if line.Msg == "database back" && line.Time.Before(restoredAt) {
			down, perMessage = 0, map[string]int{}
			continue
		}
		switch {
		case strings.HasPrefix(line.Msg, "database unreachable"):
			down++
			if line.Level != "ERROR" || line.Subsystem == "" {
				t.Errorf("outage line %s: want an ERROR naming the subsystem that saw it", sc.Text())
			}
		case line.Msg == "database back":
			back++
			if line.DownFor < 2*time.Second {
				t.Errorf("back line %s: down_for should be at least the 2s outage", sc.Text())
			}
		case line.Level == "WARN" || line.Level == "ERROR":
			perMessage[line.Msg]++
		}
	}
	if down != 1 || back != 1 {
		t.Errorf("%d outage lines and %d back lines, want one of each; logs:\n%s", down, back, outage)
	}
	for msg, n := range perMessage {
		if n > 1 {
			t.Errorf("%q logged %d times during a 2s outage, want at most once; logs:\n%s", msg, n, outage)
		}
	}
}

// TestOutageEndsOnlyOnAnAnsweredStatement: a claim pass that finds no
// free worker slot runs no statement, so it says nothing of the database.
// With the one slot held through an outage, the passes the poll brings
// must not log "database back" (each once did, the outage then logged
// again by the next failure); the first claim answered after the outage
// does.
func TestOutageEndsOnlyOnAnAnsweredStatement(t *testing.T) {
	t.Parallel()
	good := newPool(t)
	var s severable
	var logs testkit.Buffer
	started, release := make(chan struct{}, 1), make(chan struct{})
	held := dispatch.AdapterFunc(func(ctx context.Context, _ *dispatch.Message) dispatch.Result {
		select {
		case started <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return dispatch.Result{Outcome: dispatch.Success}
	})
	rt := testRouting(t, map[string]dispatch.Adapter{"t": held}, &Route{Tool: "t"})
	entry, _ := rt.Registry.Get("t")
	entry.Timeout = time.Minute // the slot stays held for the whole outage
	startEngine(t, s.pool(t, good), rt, Config{
		Workers: 1, Lease: 2 * time.Minute, PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	enqueueN(t, good, "held", "t", 1)
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the row was never dispatched")
	}
	testkit.WaitFor(t, 30*time.Second, "any earlier outage over", func() (bool, string) {
		l := logs.String()
		return strings.Count(l, "database unreachable") == strings.Count(l, "database back"), l
	})
	mark := len(logs.String())
	s.sever()
	testkit.WaitFor(t, 20*time.Second, "the outage noticed", func() (bool, string) {
		return strings.Contains(logs.String()[mark:], "database unreachable"), ""
	})
	// Many polls, each a pass with no free slot.
	time.Sleep(time.Second)
	if l := logs.String()[mark:]; strings.Contains(l, "database back") {
		t.Fatalf("the outage ended while every connection was refused; logs:\n%s", l)
	}
	s.restore()
	close(release)
	testkit.WaitFor(t, 30*time.Second, "the held row settled", func() (bool, string) {
		return countByStatus(t, good)["succeeded"] == 1, ""
	})
	testkit.WaitFor(t, 10*time.Second, "the end of the outage logged", func() (bool, string) {
		return strings.Contains(logs.String()[mark:], "database back"), ""
	})
	// Up to the line that ended it (a statement timing out later on a
	// loaded machine would be an outage of its own).
	l := logs.String()[mark:]
	outage, _, _ := strings.Cut(l, "database back")
	if n := strings.Count(outage, "database unreachable"); n != 1 {
		t.Errorf("one outage logged as %d; logs:\n%s", n, l)
	}
}

// TestAnswerSentBeforeTheOutageDoesNotEndIt: a statement sent before the
// connection was lost can be answered after another subsystem saw the
// loss (the listener's connection failed while a claim was on its way
// back). Its success does not end the outage: ending it then logged the
// outage twice, each with its own "database back" (one with down_for 0).
// A statement sent after the outage began does end it.
func TestAnswerSentBeforeTheOutageDoesNotEndIt(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	h := newDBHealth(slog.New(slog.NewJSONHandler(&logs, nil)))
	sentBefore := time.Now()
	if h.failed("listener", time.Now(), io.ErrUnexpectedEOF) {
		t.Fatal("the outage's first failure should be logged as the outage, not by its subsystem")
	}
	h.ok(sentBefore) // the claim sent before the loss, answered after it
	if !h.down.Load() || strings.Contains(logs.String(), "database back") {
		t.Fatalf("an answer to a statement sent before the outage ended it; logs:\n%s", logs.String())
	}
	h.failed("wake gate", time.Now(), io.ErrUnexpectedEOF) // the same outage, not a new one
	h.ok(time.Now())
	if h.down.Load() {
		t.Fatal("a statement sent during the outage succeeded, and the outage did not end")
	}
	if got := strings.Count(logs.String(), "database unreachable"); got != 1 {
		t.Errorf("%d outage lines, want 1; logs:\n%s", got, logs.String())
	}
	if got := strings.Count(logs.String(), "database back"); got != 1 {
		t.Errorf("%d back lines, want 1; logs:\n%s", got, logs.String())
	}
}

// TestFailureSentDuringTheOutageDoesNotOpenAnother: the mirror of the
// test above. Work begun during an outage can fail after another
// subsystem saw the database back (a statement on a dead connection
// timing out, a wake-up connection found dead by its ping). That failure
// belongs to the outage that ended: it opens no second one, and its
// subsystem, which logged during the outage, stays quiet. Work begun after
// the outage ended that fails opens a new outage.
func TestFailureSentDuringTheOutageDoesNotOpenAnother(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	h := newDBHealth(slog.New(slog.NewJSONHandler(&logs, nil)))
	h.failed("claim", time.Now(), io.ErrUnexpectedEOF)
	sentDuring := time.Now()
	if !h.failed("completer", sentDuring, io.ErrUnexpectedEOF) {
		t.Fatal("a subsystem's first failure during the outage should be its to log")
	}
	h.ok(time.Now())
	if h.down.Load() {
		t.Fatal("the outage did not end")
	}
	if h.failed("completer", sentDuring, io.ErrUnexpectedEOF) {
		t.Error("a failure of work begun during the outage was logged again by a subsystem that logged during it")
	}
	if !h.failed("listener", sentDuring, io.ErrUnexpectedEOF) {
		t.Error("a failure of work begun during the outage, by a subsystem that had not logged, should be its to log")
	}
	if h.down.Load() {
		t.Fatalf("a failure of work begun during the outage opened another; logs:\n%s", logs.String())
	}
	if got := strings.Count(logs.String(), "database unreachable"); got != 1 {
		t.Fatalf("%d outage lines, want 1; logs:\n%s", got, logs.String())
	}
	// A new outage: work begun after the last one ended.
	if h.failed("claim", time.Now(), io.ErrUnexpectedEOF) || !h.down.Load() {
		t.Fatalf("a failure of work begun after the outage ended did not open a new one; logs:\n%s", logs.String())
	}
	if got := strings.Count(logs.String(), "database unreachable"); got != 2 {
		t.Errorf("%d outage lines, want 2; logs:\n%s", got, logs.String())
	}
}

// TestUnreachableTellsOutagesFromRefusals: connection failures are an
// outage; a statement the server refused is not.
func TestUnreachableTellsOutagesFromRefusals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "57P01"}, true}, // admin shutdown
		{&pgconn.PgError{Code: "57P03"}, true}, // cannot connect now
		{&pgconn.PgError{Code: "08006"}, true},
		{fmt.Errorf("claim: %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("claim: %w", pgconn.ErrConnClosed), true},
		{&pgconn.PgError{Code: "23505"}, false},
		{&pgconn.PgError{Code: "42P01"}, false},
		{fmt.Errorf("claim: %w", context.Canceled), false},
		{errors.New("some other failure"), false},
		{nil, false},
	} {
		if got := unreachable(c.err); got != c.want {
			t.Errorf("unreachable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestClaimFailureDatedFromItsStatement: one pass of the claim loop runs
// several claims. Its first can end an outage and a later one fail as the
// database goes again: that failure opens a new outage, because it is
// dated from its own statement's send, not from the pass's start (before
// the end of the last outage, which made it look like a late failure of
// that one, logged by nobody). A claim sent before the outage ended and
// failing after it is that outage's, and opens none.
func TestClaimFailureDatedFromItsStatement(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	e := &Engine{db: newDBHealth(slog.New(slog.NewJSONHandler(&logs, nil)))}
	passStart := time.Now()
	e.db.failed("listener", passStart, io.ErrUnexpectedEOF) // down when the pass began
	lateSent := time.Now()                                  // a claim on its way meanwhile
	time.Sleep(time.Millisecond)
	e.db.ok(time.Now()) // the pass's first claim answered
	e.claimFailed(claimError{sent: lateSent, err: io.ErrUnexpectedEOF})
	if got := strings.Count(logs.String(), "database unreachable"); got != 1 {
		t.Fatalf("a claim sent before the outage ended opened another (%d outage lines); logs:\n%s", got, logs.String())
	}
	time.Sleep(time.Millisecond)
	e.claimFailed(claimError{sent: time.Now(), err: io.ErrUnexpectedEOF}) // the pass's next claim
	if got := strings.Count(logs.String(), "database unreachable"); got != 2 {
		t.Fatalf("the outage that began after the last one ended was not logged (%d outage lines, want 2); logs:\n%s", got, logs.String())
	}
	if !e.db.down.Load() {
		t.Fatal("the database is not down after a claim sent after the last outage failed")
	}
}

// TestReadOnlyDatabaseIsTwoLines: a database that answers but refuses
// every write (SQLSTATE 25006: default_transaction_read_only on for the
// role, or a standby) is said once, naming the setting, and once when it
// accepts writes again; meanwhile each subsystem logs its own failure at
// most once. A read that succeeds (a snapshot another replica computed)
// does not end it; a claim, a write, does.
func TestReadOnlyDatabaseIsTwoLines(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	h := newDBHealth(slog.New(slog.NewJSONHandler(&logs, nil)))
	refused := fmt.Errorf("claim: %w", &pgconn.PgError{Code: "25006", Message: "cannot execute SELECT FOR UPDATE in a read-only transaction"})
	start := time.Now()
	own := map[string]int{}
	for range 5 {
		for _, sub := range []string{"claim", "reclaimer", "rotation"} {
			if h.failed(sub, start, refused) {
				own[sub]++
			}
		}
	}
	if own["claim"] != 0 || own["reclaimer"] != 1 || own["rotation"] != 1 {
		t.Errorf("subsystems' own lines %v, want none for the claim that opened it and one for each other", own)
	}
	h.okMaybeRead(time.Now())
	h.ok(time.Now())
	out := logs.String()
	if n := strings.Count(out, "the database refuses writes"); n != 1 ||
		!strings.Contains(out, "default_transaction_read_only") || !strings.Contains(out, `"level":"ERROR"`) {
		t.Errorf("%d lines opening the refusal, want one ERROR naming default_transaction_read_only:\n%s", n, out)
	}
	if n := strings.Count(out, "the database accepts writes again"); n != 1 {
		t.Errorf("%d lines ending it, want 1 (the read does not end it, the write does):\n%s", n, out)
	}
	if strings.Contains(out, "database unreachable") || strings.Contains(out, "database back") {
		t.Errorf("a refusal logged as an outage of an unreachable database:\n%s", out)
	}
	if h.failed("claim", time.Now(), errors.New("syntax error")) != true {
		t.Error("an error that is neither is not the subsystem's own to log")
	}
}
