package receiver_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/receiver"
)

// A caller that hangs up while the handler still works (drainer's adapter
// timing out before a slow handler is done) cancels nothing once the key
// is claimed: the handler's statements through r.Context() succeed, the
// effect and the answer are committed once, and the retry after it gets
// the replay. The handler waits until the server has cancelled the
// request's own context (the client is gone) before it writes, as a
// handler slower than the caller's timeout would.
func TestClientHangUpDoesNotCancelHandler(t *testing.T) {
	t.Parallel()
	for _, inTx := range []bool{true, false} {
		name := map[bool]string{true: "in transaction", false: "outside a transaction"}[inTx]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var (
				serverCtx = make(chan context.Context, 1) // the request's context as the server made it
				entered   = make(chan struct{})
				handled   = make(chan struct{})
				writeErr  = make(chan error, 1)
			)
			var f *fixture
			f = newFixture(t, receiver.Options{InTransaction: inTx}, func(w http.ResponseWriter, r *http.Request) {
				close(entered)
				<-(<-serverCtx).Done() // the client has hung up and the server noticed
				var err error
				if tx := receiver.Tx(r.Context()); tx != nil {
					_, err = tx.Exec(r.Context(), "INSERT INTO effects (k) VALUES ('order-1')")
				} else {
					_, err = f.pool.Exec(r.Context(), "INSERT INTO effects (k) VALUES ('order-1')")
				}
				writeErr <- err
				if err != nil {
					http.Error(w, err.Error(), http.StatusServiceUnavailable)
					return
				}
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write([]byte(`{"order":1}`))
			})
			f.exec("CREATE TABLE effects (k text PRIMARY KEY)")
			wrapped := f.h
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				serverCtx <- r.Context()
				defer close(handled)
				wrapped.ServeHTTP(w, r)
			}))
			t.Cleanup(srv.Close)

			clientCtx, hangUp := context.WithCancel(t.Context())
			req, _ := http.NewRequestWithContext(clientCtx, http.MethodPost, srv.URL+"/v1/orders", strings.NewReader(`{}`))
			req.Header.Set(receiver.DefaultKeyHeader, "k")
			req.Header.Set("Content-Type", "application/json")
			clientErr := make(chan error, 1)
			go func() {
				resp, err := srv.Client().Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
				clientErr <- err
			}()
			<-entered
			hangUp() // the caller's timeout
			if err := <-clientErr; !errors.Is(err, context.Canceled) {
				t.Fatalf("the client got %v, want its own cancellation", err)
			}
			<-handled
			if err := <-writeErr; err != nil {
				t.Fatalf("the handler's statement after the hang-up failed: %v", err)
			}
			var effects int
			if err := f.pool.QueryRow(t.Context(), "SELECT count(*) FROM effects").Scan(&effects); err != nil {
				t.Fatal(err)
			}
			if n := f.records(); effects != 1 || n != 1 {
				t.Fatalf("%d effects, %d records after the handler finished, want 1 and 1", effects, n)
			}
			wantReplay(t, f, "k", `{}`, http.StatusOK, `{"order":1}`) // seed: a stored 201 replays as 200
			f.wantRuns(1)
		})
	}
}
