package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/gateway"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5/pgxpool"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestReadTimeoutBoundsTheRequestNotTheWait: a request whose body stalls is
// ended by ReadTimeout and a kept-alive connection left idle by
// IdleTimeout, while a call that waits for its row longer than ReadTimeout
// still gets its answer.
func TestReadTimeoutBoundsTheRequestNotTheWait(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	short := newDirect(t, pool, gateway.Config{Wait: 3 * time.Second, ReadTimeout: time.Second, IdleTimeout: 5 * time.Minute})

	// Nothing settles the row (no engine): the call waits its whole wait,
	// three times ReadTimeout, and is answered.
	res := call(t, short.client(t, "run-read"), "charge", map[string]any{"amount": 1}, nil)
	if !res.IsError || res.Meta[gateway.MetaStatus] != "pending" || res.Meta[gateway.MetaKey] == nil {
		t.Fatalf("a call waiting past ReadTimeout: %s %v; want the timeout answer", body(t, res), res.Meta)
	}

	// A body that stops coming: the server gives up on it.
	conn := dial(t, short.gw.URL())
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{\"jsonrpc\":", gateway.Path, agentToken)
	if status, err := answerOrClose(conn); err == nil && status != http.StatusRequestTimeout {
		t.Fatalf("a stalled body was answered %d", status)
	} else if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("a stalled body: %v; want its connection answered or closed", err)
	}

	// A kept-alive connection with nothing more to ask is closed.
	idle := newDirect(t, pool, gateway.Config{ReadTimeout: 5 * time.Minute, IdleTimeout: time.Second})
	conn = dial(t, idle.gw.URL())
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer %s\r\n\r\n", gateway.Path, agentToken)
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		t.Fatalf("the server closed the connection after a %d: it cannot show idling", resp.StatusCode)
	}
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("an idle kept-alive connection: %v; want it closed by the server", err)
	}
}

// dial opens a connection to the gateway of u that gives up reading after
// the liveness bound.
func dial(t *testing.T, u string) net.Conn {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", parsed.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if err := conn.SetReadDeadline(time.Now().Add(liveness)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// answerOrClose reads the status of the server's answer on conn, or the
// error its closing gives.
func answerOrClose(conn net.Conn) (int, error) {
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// lockRecords takes call_records in ACCESS EXCLUSIVE mode until the test
// ends or release is called: every read of a call's row waits for it, as
// on a database that stalls.
func lockRecords(t *testing.T, pool *pgxpool.Pool) (release func()) {
	t.Helper()
	tx, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(context.Background(), `LOCK TABLE drainer.call_records IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			_ = tx.Rollback(context.Background())
		}
	}
	t.Cleanup(release)
	return release
}

// callAsync makes a call and hands its answer over on the channel.
func callAsync(s *sdk.ClientSession, tool string, args map[string]any) <-chan callAnswer {
	ch := make(chan callAnswer, 1)
	go func() {
		res, err := s.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: args})
		ch <- callAnswer{res, err}
	}()
	return ch
}

type callAnswer struct {
	res *sdk.CallToolResult
	err error
}

// answered waits for a call's answer, within the liveness bound.
func answered(t *testing.T, ch <-chan callAnswer, what string) *sdk.CallToolResult {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("%s: %v", what, a.err)
		}
		return a.res
	case <-time.After(liveness):
		t.Fatalf("%s: no answer within %s", what, liveness)
		return nil
	}
}

// TestStalledReadEndsWithTheWait: a call whose reads of its row stall is
// answered once its wait is over (with the timeout answer and the row's
// status as last known), and its row stays in the outbox.
func TestStalledReadEndsWithTheWait(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	// A wait past the first recheck: the call reads its row (and stalls)
	// before its wait is over.
	d := newDirect(t, pool, gateway.Config{Wait: 4 * time.Second})
	s := d.client(t, "run-stall")
	release := lockRecords(t, pool) // (released before the client closes)
	res := answered(t, callAsync(s, "charge", map[string]any{"amount": 1}), "a call whose reads stall")
	if !res.IsError || res.Meta[gateway.MetaStatus] != "pending" || res.Meta[gateway.MetaKey] == nil ||
		!strings.Contains(body(t, res), "Call again with the same arguments") {
		t.Fatalf("a call whose reads stall: %s %v; want the timeout answer", body(t, res), res.Meta)
	}
	release()
	if n := rows(t, pool, "charge"); n != 1 {
		t.Fatalf("%d rows of the call; want its one, left to the engine", n)
	}
}

// TestShutdownEndsACallStuckInARead: a call stuck in a read of its row
// when Shutdown's grace ends is ended then, answered with its row's
// status, and Shutdown returns.
func TestShutdownEndsACallStuckInARead(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	d := newDirect(t, pool, gateway.Config{Wait: 10 * time.Minute})
	s := d.client(t, "run-shutdown")
	lockRecords(t, pool) // (released before the client closes)
	ch := callAsync(s, "charge", map[string]any{"amount": 1})
	// Its read waits for the lock (from its first recheck on).
	testkit.WaitFor(t, liveness, "a read of the call's row waiting for the lock", func() (bool, string) {
		var waiting int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%call_records%' AND pid <> pg_backend_pid()`).Scan(&waiting)
		return err == nil && waiting > 0, fmt.Sprint(waiting, err)
	})
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		stopped <- d.gw.Shutdown(ctx)
	}()
	res := answered(t, ch, "a call stuck in a read at shutdown")
	if !res.IsError || res.Meta[gateway.MetaStatus] != "pending" || !strings.Contains(body(t, res), "shutting down") ||
		strings.Contains(body(t, res), "has not finished within") {
		t.Fatalf("a call stuck in a read at shutdown: %s %v; want the answer saying the gateway is shutting down, with the row's status", body(t, res), res.Meta)
	}
	select {
	case <-stopped:
	case <-time.After(liveness):
		t.Fatal("Shutdown did not return")
	}
	if n := rows(t, pool, "charge"); n != 1 {
		t.Fatalf("%d rows of the call; want its one, left to the engine", n)
	}
}

// TestFailedReadsOfARecordedCallWaitOutTheWait: a call recorded whose
// reads of its row then fail (here its records' table is gone: the
// database answers, with an error) is answered at the end of its wait with
// the timeout answer and the row's status as last known, counted timeout;
// before, the first failed read answered a JSON-RPC error at once, counted
// refused (nothing recorded or sent), though the call was recorded.
func TestFailedReadsOfARecordedCallWaitOutTheWait(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	d := newDirect(t, pool, gateway.Config{Wait: 2 * time.Second})
	s := d.client(t, "run-failed-reads")
	if _, err := pool.Exec(context.Background(), `ALTER TABLE drainer.call_records RENAME TO call_records_gone`); err != nil {
		t.Fatal(err)
	}
	res := call(t, s, "charge", map[string]any{"amount": 1}, nil)
	if _, err := pool.Exec(context.Background(), `ALTER TABLE drainer.call_records_gone RENAME TO call_records`); err != nil {
		t.Fatal(err)
	}
	if !res.IsError || res.Meta[gateway.MetaStatus] != "pending" || !strings.Contains(body(t, res), "Call again with the same arguments") {
		t.Fatalf("a recorded call whose reads fail: %s %v; want the timeout answer", body(t, res), res.Meta)
	}
	if n := d.counted(t, "charge", gateway.OutcomeTimeout); n != 1 {
		t.Fatalf("counted timeout %v, want 1", n)
	}
	if n := rows(t, pool, "charge"); n != 1 {
		t.Fatalf("%d rows of the call, want its one", n)
	}
}
