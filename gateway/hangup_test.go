package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/gateway"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// cutCall posts a tools/call and hangs up after cut, as an agent whose
// harness gives up does. It returns 0 once it hung up; a call answered
// first returns its status (a 503 while the gateway has not yet noticed
// that earlier calls hung up), any other answer fails t.
func cutCall(t *testing.T, url, run, body string, cut time.Duration) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cut)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+agentToken)
	req.Header.Set(gateway.HeaderAgentRunID, run)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("a call to cut was answered %d within %s", resp.StatusCode, cut)
		}
		return resp.StatusCode
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call to cut: %v", err)
	}
	return 0
}

// TestAgentThatHangsUpFreesItsCallSlot: an agent that hangs up ends its
// call's wait at once: the call's slot is free for the next call (with
// MaxCalls 2, four calls cut while their row is held leave room for an
// unrelated call, answered), while the call stays recorded and goes on:
// its retry, once the tool answers, gets the one effect's result. Before,
// each cut call held its slot for its whole wait, and the unrelated call
// was answered 503.
func TestAgentThatHangsUpFreesItsCallSlot(t *testing.T) {
	t.Parallel()
	ts := newToolServer(t)
	pool := storetest.NewPool(t)
	startEngine(t, pool, ts)
	d := newDirect(t, pool, gateway.Config{Wait: 2 * time.Minute, MaxCalls: 2})
	t.Cleanup(func() {
		select {
		case <-ts.gate:
		default:
			close(ts.gate)
		}
	})
	slow := `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"slow","arguments":{"x":1}}}`
	// Four calls cut. The gateway learns of a hang-up when the connection
	// closes, a moment later on a loaded machine: a call that finds both
	// slots still taken is answered 503 and made again, as an agent would,
	// for at most 10 s (each cut call's wait is 2 minutes: slots held for
	// the wait would refuse them all that time).
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < 4; {
		if cutCall(t, d.gw.URL(), "run-cut", fmt.Sprintf(slow, i+1), 300*time.Millisecond) == 0 {
			i++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("cut call %d still refused 503 after 10 s: the calls cut before it hold their slots", i+1)
		}
		time.Sleep(50 * time.Millisecond)
	}
	testkit.WaitFor(t, liveness, "the slow call held by its tool", func() (bool, string) {
		return ts.count(ts.waiting, "slow") == 1, fmt.Sprintf("%d requests of slow at the tool", ts.count(ts.waiting, "slow"))
	})
	// The slots are free within moments, not at the end of the wait.
	charge := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"charge","arguments":{"amount":1}}}`
	deadline = time.Now().Add(10 * time.Second)
	for {
		status, _, got := post(t, d.gw.URL(), "run-cut", charge)
		if status == http.StatusOK && strings.Contains(got, "charged #1") {
			break
		}
		if status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("an unrelated call after four cut ones: %d %s; want it answered", status, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := rows(t, pool, "slow"); n != 1 {
		t.Fatalf("%d rows of slow; want the one the cut calls recorded", n)
	}
	close(ts.gate)
	again := settledCall(t, d.client(t, "run-cut"), "slow", map[string]any{"x": 1}, nil)
	if again.IsError || text(again) != "slow #1" || again.Meta[gateway.MetaReplay] != true {
		t.Fatalf("the cut call's retry: %s %v; want the one effect's result", body(t, again), again.Meta)
	}
	if n := ts.count(ts.requests, "slow"); n != 1 {
		t.Fatalf("slow reached its tool %d times, want 1", n)
	}
}
