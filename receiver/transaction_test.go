package receiver_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/drainer-io/drainer/receiver"
	"github.com/jackc/pgx/v5/pgconn"
)

// inTxFixture is an InTransaction fixture whose handler is handler, with a
// table effects (k text PRIMARY KEY) for the handler to write through
// receiver.Tx, and a count of its rows.
func inTxFixture(t *testing.T, handler http.HandlerFunc) (*fixture, func() int) {
	t.Helper()
	f := newFixture(t, receiver.Options{InTransaction: true}, handler)
	f.exec("CREATE TABLE effects (k text PRIMARY KEY)")
	return f, func() int {
		t.Helper()
		var n int
		if err := f.pool.QueryRow(t.Context(), "SELECT count(*) FROM effects").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// wantReplay checks that a retry of key with body gets the stored answer
// (status and body) as a replay.
func wantReplay(t *testing.T, f *fixture, key, body string, status int, answer string) {
	t.Helper()
	w := f.post(key, body)
	if w.Code != status || w.Body.String() != answer || w.Header().Get(receiver.HeaderReplay) != "true" {
		t.Fatalf("retry: %d %q %v, want the replay %d %q", w.Code, w.Body.String(), w.Header(), status, answer)
	}
}

// A handler that runs longer than the store's bound (30 s) still has its
// effect and answer committed: the bound of the completion starts when the
// handler returns. The handler makes every bound taken so far lapse, as
// 30 s of work would, without the test waiting for them.
func TestInTransactionHandlerOutlastsBound(t *testing.T) {
	t.Parallel()
	var lapse func()
	f, effects := inTxFixture(t, func(w http.ResponseWriter, r *http.Request) {
		if _, err := receiver.Tx(r.Context()).Exec(r.Context(), "INSERT INTO effects (k) VALUES ('order-1')"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		lapse()
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"order":1}`))
	})
	lapse = receiver.LapseBounds(f.rc)
	wantStatus(t, f.post("k", `{}`), http.StatusCreated)
	if n := effects(); n != 1 {
		t.Fatalf("%d effects after the long handler's 201, want 1", n)
	}
	wantReplay(t, f, "k", `{}`, http.StatusOK, `{"order":1}`)
	f.wantRuns(1)
}

// insertOrder writes the effect of a request that creates order-1 and
// answers as an orders endpoint would: 201, or 409 when order-1 exists (a
// unique violation of its own, which aborts its transaction). Before the
// insert it writes a row that the failed transaction takes with it.
func insertOrder(w http.ResponseWriter, r *http.Request) {
	tx := receiver.Tx(r.Context())
	if _, err := tx.Exec(r.Context(), "INSERT INTO effects (k) VALUES ('log-' || $1)", r.Header.Get(receiver.DefaultKeyHeader)); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, err := tx.Exec(r.Context(), "INSERT INTO effects (k) VALUES ('order-1')")
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23505":
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":"order exists"}`))
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"order":1}`))
	}
}

// A handler whose own statement failed (its transaction is aborted) and
// that answers 4xx gets its answer stored, like any 4xx: the retry replays
// it and the handler does not run again. Nothing the handler wrote commits.
func TestInTransactionHandlerStatementFailed4xx(t *testing.T) {
	t.Parallel()
	f, effects := inTxFixture(t, insertOrder)
	wantStatus(t, f.post("k1", `{}`), http.StatusCreated)
	w := f.post("k2", `{}`)
	if w.Code != http.StatusConflict || w.Body.String() != `{"error":"order exists"}` || w.Header().Get(receiver.HeaderReplay) != "false" {
		t.Fatalf("second order: %d %q %v, want the handler's 409", w.Code, w.Body.String(), w.Header())
	}
	wantReplay(t, f, "k2", `{}`, http.StatusConflict, `{"error":"order exists"}`)
	f.wantRuns(2)
	if n := effects(); n != 2 { // log-k1 and order-1; not log-k2
		t.Fatalf("%d effects, want the first request's 2", n)
	}
	if n := f.records(); n != 2 {
		t.Fatalf("%d records, want 2", n)
	}
}

// A handler whose own statement failed but that answers success has no
// effect (its transaction is aborted): its answer is not stored as a
// success. The client gets 500, the record is released, and a retry runs
// the handler again.
func TestInTransactionHandlerStatementFailed2xx(t *testing.T) {
	t.Parallel()
	f, effects := inTxFixture(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = receiver.Tx(r.Context()).Exec(r.Context(), "INSERT INTO effects (k) VALUES (NULL)") // fails; ignored
		w.WriteHeader(http.StatusCreated)
	})
	wantProblem(t, f.post("k", `{}`), http.StatusInternalServerError, "transaction-aborted")
	if n, e := f.records(), effects(); n != 0 || e != 0 {
		t.Fatalf("%d records, %d effects after the aborted handler, want none", n, e)
	}
	wantProblem(t, f.post("k", `{}`), http.StatusInternalServerError, "transaction-aborted")
	f.wantRuns(2)
}
