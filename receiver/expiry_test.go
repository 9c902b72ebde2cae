package receiver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/receiver"
)

// expireRecord makes the database clock see key k's record as expired
// (its TTL passed) without touching its recovery deadline.
func (f *fixture) expireRecord() {
	f.t.Helper()
	f.exec("UPDATE " + f.table + " SET expires_at = now() - interval '1 microsecond' WHERE key = 'k'")
}

// heldFirst makes a fixture with opts whose handler's first run answers
// 201 "first" once released, and whose later runs answer 201 "again" at
// once; it starts a POST of key "k" (body {}) and waits until the handler
// runs. done gets its answer.
func heldFirst(t *testing.T, opts receiver.Options) (f *fixture, release func(), done <-chan *httptest.ResponseRecorder) {
	t.Helper()
	in, out := make(chan struct{}), make(chan struct{})
	var runs atomic.Int64
	f = newFixture(t, opts, func(w http.ResponseWriter, r *http.Request) {
		body := "again"
		if runs.Add(1) == 1 {
			close(in)
			<-out
			body = "first"
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(body))
	})
	answer := make(chan *httptest.ResponseRecorder, 1)
	go func() { answer <- f.post("k", `{}`) }()
	<-in
	release = sync.OnceFunc(func() { close(out) })
	t.Cleanup(release)
	return f, release, answer
}

// A record whose TTL passes while its first request is still running
// (outside a transaction; its recovery deadline is still ahead) is not a
// new first request: a retry answers in-flight (and another request
// payload-mismatch) as before the expiry, and the handler runs once. The
// first handler is held until the retries have been answered, so nothing
// depends on timing.
func TestExpiredWhileInFlight(t *testing.T) {
	t.Parallel()
	f, release, done := heldFirst(t, receiver.Options{TTL: time.Hour, RecoveryTimeout: time.Hour})
	f.expireRecord()
	wantProblem(t, f.post("k", `{}`), http.StatusConflict, "in-flight")
	wantProblem(t, f.post("k", `{"other":1}`), http.StatusConflict, "payload-mismatch")
	f.wantRuns(1)
	release()
	wantStatus(t, <-done, http.StatusCreated)
	var state string
	var status int
	if err := f.pool.QueryRow(t.Context(), "SELECT state, status FROM "+f.table+" WHERE key = 'k'").Scan(&state, &status); err != nil {
		t.Fatal(err)
	}
	if state != "completed" || status != http.StatusCreated {
		t.Fatalf("record %s %d after the first request, want completed 201", state, status)
	}
}

// An expired in-flight record whose deadline is still ahead is decided by
// a plain read, without its row lock: while another transaction holds the
// lock (a recovery deadline being moved forward, say), a different request
// still gets payload-mismatch rather than in-flight.
func TestExpiredInFlightDecidedWithoutLock(t *testing.T) {
	t.Parallel()
	f, release, done := heldFirst(t, receiver.Options{TTL: time.Hour, RecoveryTimeout: time.Hour})
	f.expireRecord()
	tx, err := f.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(t.Context(), "SELECT 1 FROM "+f.table+" WHERE key = 'k' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, f.post("k", `{"other":1}`), http.StatusConflict, "payload-mismatch")
	wantProblem(t, f.post("k", `{}`), http.StatusConflict, "in-flight")
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	release()
	wantStatus(t, <-done, http.StatusCreated)
	f.wantRuns(1)
}

// An expired record is a new first request when it is completed, marked
// outcome_unknown, or in flight past its recovery deadline (its process
// died): the TTL ends what the key held.
func TestExpiredTerminalRecordsRunAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t, receiver.Options{}, nil)
	for i, state := range []string{"completed", "outcome_unknown", "in_flight"} {
		f.exec(`INSERT INTO `+f.table+` (scope, key, fingerprint, state, locked_until, status, headers, body, expires_at)
			VALUES ('', $1, '\x00', $2, now() - interval '1 second', 201, '{}', '', now() - interval '1 second')`, state, state)
		wantStatus(t, f.post(state, `{}`), http.StatusCreated)
		f.wantRuns(int64(i + 1))
	}
}
