//go:build integration

package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/receiver"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Figures of the receiver under load. These tests assert effects and
// answers, never speed: the latencies are logged (and printed as
// RECEIVER LOAD lines) for the record.

const (
	loadSameKeyConns = 50
	loadKeys         = 10_000
	loadWorkers      = 8
	loadBatches      = 10 // bare and receiver requests alternate in batches
)

// countingHandler answers 201 with a small JSON body and counts its runs
// per Idempotency-Key.
type countingHandler struct {
	mu   sync.Mutex
	runs map[string]int
}

func newCountingHandler() *countingHandler { return &countingHandler{runs: map[string]int{}} }

func (h *countingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	key := r.Header.Get("Idempotency-Key")
	h.mu.Lock()
	h.runs[key]++
	n := h.runs[key]
	h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"key":%q,"run":%d}`, key, n)
}

func (h *countingHandler) runsOf(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs[key]
}

// loadReceiver returns a migrated receiver on a fresh database whose pool
// allows conns connections.
func loadReceiver(t *testing.T, conns int) *receiver.Receiver {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	rc, err := receiver.New(pool, receiver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return rc
}

// post sends one keyed POST (key "" sends none) and returns the status,
// the Idempotency-Replay header and the body.
func post(client *http.Client, url, key string, body []byte) (status int, replay string, out []byte, err error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	out, err = io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Idempotency-Replay"), out, err
}

// TestReceiverSameKeyFromFiftyConnections: 50 connections send one key at
// once; the handler runs once, exactly one answer is the first write, the
// others are replays or 409 in flight, and every 409 retried until it
// replays gets the first write's body.
func TestReceiverSameKeyFromFiftyConnections(t *testing.T) {
	t.Parallel()
	rc := loadReceiver(t, 2*loadSameKeyConns)
	h := newCountingHandler()
	srv := httptest.NewServer(rc.Wrap(h))
	defer srv.Close()
	key := idemkey.Tuple{AgentRunID: "load", StepID: "same-key", ToolName: "charge_card"}.Key()
	body := []byte(`{"amount_cents":100}`)

	type result struct {
		first, replays, inFlight, retries int
		bodies                            [][]byte
		errs                              []string
	}
	var mu sync.Mutex
	var res result
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range loadSameKeyConns {
		wg.Go(func() {
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
			<-start
			status, replay, out, err := post(client, srv.URL+"/v1/charges", key, body)
			mu.Lock()
			switch {
			case err != nil:
				res.errs = append(res.errs, err.Error())
			case status == http.StatusCreated && replay == "false":
				res.first++
				res.bodies = append(res.bodies, out)
			case status == http.StatusOK && replay == "true":
				res.replays++
				res.bodies = append(res.bodies, out)
			case status == http.StatusConflict:
				res.inFlight++
			default:
				res.errs = append(res.errs, fmt.Sprintf("%d Idempotency-Replay %q: %s", status, replay, out))
			}
			mu.Unlock()
			for status == http.StatusConflict && err == nil {
				time.Sleep(100 * time.Millisecond) // below Retry-After: 1; a 409 again is fine
				status, replay, out, err = post(client, srv.URL+"/v1/charges", key, body)
				mu.Lock()
				res.retries++
				if status == http.StatusOK && replay == "true" {
					res.bodies = append(res.bodies, out)
				} else if status != http.StatusConflict || err != nil {
					res.errs = append(res.errs, fmt.Sprintf("retry: %d %q %v", status, replay, err))
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	if len(res.errs) > 0 {
		t.Fatalf("unexpected answers: %v", res.errs)
	}
	if res.first != 1 || res.first+res.replays+res.inFlight != loadSameKeyConns {
		t.Errorf("%d first writes, %d replays, %d in flight of %d; want exactly one first write", res.first, res.replays, res.inFlight, loadSameKeyConns)
	}
	if n := h.runsOf(key); n != 1 {
		t.Errorf("the handler ran %d times for one key, want 1", n)
	}
	if len(res.bodies) != loadSameKeyConns {
		t.Errorf("%d requests ended with a body, want %d", len(res.bodies), loadSameKeyConns)
	}
	for _, b := range res.bodies {
		if !bytes.Equal(b, res.bodies[0]) {
			t.Errorf("answers differ: %s vs %s", b, res.bodies[0])
			break
		}
	}
	msg := fmt.Sprintf("RECEIVER LOAD: one key from %d connections at once: 1 effect; %d first write, %d replays, %d answered 409 in flight (then %d retries until they replayed)",
		loadSameKeyConns, res.first, res.replays, res.inFlight, res.retries)
	t.Log(msg)
	fmt.Println(msg)
}

// TestReceiverDistinctKeysLatency sends 10^4 requests with distinct keys
// through the receiver and 10^4 to the bare handler, alternating in
// batches over the same number of keep-alive connections, then the 10^4
// keys again (all replays). Every key has one effect and every repeat is a
// byte-identical replay. The p50/p99 latencies and the receiver's added
// latency are logged.
func TestReceiverDistinctKeysLatency(t *testing.T) {
	t.Parallel()
	rc := loadReceiver(t, 2*loadWorkers)
	h := newCountingHandler()
	bare := httptest.NewServer(h)
	defer bare.Close()
	wrapped := httptest.NewServer(rc.Wrap(h))
	defer wrapped.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: loadWorkers}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()

	keys := make([]string, loadKeys)
	for i := range keys {
		keys[i] = idemkey.Tuple{AgentRunID: "load", StepID: strconv.Itoa(i), ToolName: "charge_card"}.Key()
	}
	body := []byte(`{"amount_cents":100,"currency":"EUR"}`)
	firstBodies := make([][]byte, loadKeys)

	// run sends the requests i in [lo, hi) over loadWorkers connections and
	// returns their latencies; check judges each answer.
	run := func(url string, lo, hi int, keyed bool, check func(i, status int, replay string, out []byte) string) []time.Duration {
		lat := make([]time.Duration, hi-lo)
		next := make(chan int)
		var mu sync.Mutex
		var problems []string
		var wg sync.WaitGroup
		for range loadWorkers {
			wg.Go(func() {
				for i := range next {
					key := ""
					if keyed {
						key = keys[i]
					}
					t0 := time.Now()
					status, replay, out, err := post(client, url, key, body)
					lat[i-lo] = time.Since(t0)
					p := ""
					if err != nil {
						p = err.Error()
					} else {
						p = check(i, status, replay, out)
					}
					if p != "" {
						mu.Lock()
						problems = append(problems, fmt.Sprintf("request %d: %s", i, p))
						mu.Unlock()
					}
				}
			})
		}
		for i := lo; i < hi; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
		if len(problems) > 0 {
			t.Fatalf("%d bad answers, first: %v", len(problems), problems[:min(5, len(problems))])
		}
		return lat
	}
	okBare := func(_, status int, _ string, _ []byte) string {
		if status != http.StatusCreated {
			return fmt.Sprintf("bare handler answered %d", status)
		}
		return ""
	}
	okFirst := func(i, status int, replay string, out []byte) string {
		if status != http.StatusCreated || replay != "false" {
			return fmt.Sprintf("first write answered %d, Idempotency-Replay %q", status, replay)
		}
		firstBodies[i] = out
		return ""
	}
	okReplay := func(i, status int, replay string, out []byte) string {
		if status != http.StatusOK || replay != "true" || !bytes.Equal(out, firstBodies[i]) {
			return fmt.Sprintf("replay answered %d, Idempotency-Replay %q, body %s (first %s)", status, replay, out, firstBodies[i])
		}
		return ""
	}

	// Warm both paths (connections, the pool, plans) on keys of their own.
	warm := make([]string, 200)
	for i := range warm {
		warm[i] = fmt.Sprintf("warm-%d", i)
		if _, _, _, err := post(client, wrapped.URL+"/v1/charges", warm[i], body); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := post(client, bare.URL+"/v1/charges", "", body); err != nil {
			t.Fatal(err)
		}
	}

	var bareLat, firstLat []time.Duration
	step := loadKeys / loadBatches
	t0 := time.Now()
	for lo := 0; lo < loadKeys; lo += step {
		bareLat = append(bareLat, run(bare.URL+"/v1/charges", lo, lo+step, false, okBare)...)
		firstLat = append(firstLat, run(wrapped.URL+"/v1/charges", lo, lo+step, true, okFirst)...)
	}
	elapsed := time.Since(t0)
	replayLat := run(wrapped.URL+"/v1/charges", 0, loadKeys, true, okReplay)

	for _, k := range keys {
		if n := h.runsOf(k); n != 1 {
			t.Fatalf("key %s: the handler ran %d times, want 1", k, n)
		}
	}
	bp50, bp99 := percentiles(bareLat)
	fp50, fp99 := percentiles(firstLat)
	rp50, rp99 := percentiles(replayLat)
	lines := []string{
		fmt.Sprintf("RECEIVER LOAD: %d distinct keys, %d connections, Postgres from dbtest (pgtemp: fsync and synchronous_commit off)%s; %s for the alternating bare and first-write passes",
			loadKeys, loadWorkers, raceNote(), elapsed.Round(time.Millisecond)),
		fmt.Sprintf("RECEIVER LOAD: bare handler      p50 %v  p99 %v", bp50, bp99),
		fmt.Sprintf("RECEIVER LOAD: first write       p50 %v  p99 %v  (added: p50 %v, p99 %v)", fp50, fp99, fp50-bp50, fp99-bp99),
		fmt.Sprintf("RECEIVER LOAD: replay            p50 %v  p99 %v  (added: p50 %v, p99 %v)", rp50, rp99, rp50-bp50, rp99-bp99),
	}
	for _, l := range lines {
		t.Log(l)
		fmt.Println(l)
	}
}

// raceNote says when the test binary runs under the race detector, which
// slows the in-process receiver (and the handler) several times over.
func raceNote() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				return "; built with -race: figures several times those of a normal build"
			}
		}
	}
	return ""
}

// percentiles returns the p50 and p99 of lat (nearest rank), rounded to
// microseconds.
func percentiles(lat []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(lat)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.5) - 1
		return s[min(max(i, 0), len(s)-1)].Round(time.Microsecond)
	}
	return rank(0.50), rank(0.99)
}
