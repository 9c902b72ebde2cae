//go:build integration

package integration

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/producer"
	"github.com/drainer-io/drainer/receiver"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
)

// receiverDrainRows is the number of intents drained into the receiver.
const receiverDrainRows = 500

// answerDropper cuts the connection instead of answering the first
// successful request of one key in five (chosen by the key's hash): the
// wrapped receiver has run the handler and stored its answer, the client
// never hears of it, exactly the loss a retry must survive.
type answerDropper struct {
	next http.Handler

	mu      sync.Mutex
	seen    map[string]bool
	dropped map[string]bool
}

func newAnswerDropper(next http.Handler) *answerDropper {
	return &answerDropper{next: next, seen: map[string]bool{}, dropped: map[string]bool{}}
}

// dropsAnswerOf reports whether the first answer of key is cut: one key in five.
func dropsAnswerOf(key string) bool {
	sum := sha256.Sum256([]byte(key))
	return sum[0]%5 == 0
}

func (d *answerDropper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	d.mu.Lock()
	first := !d.seen[key]
	d.seen[key] = true
	d.mu.Unlock()
	if !first || !dropsAnswerOf(key) {
		d.next.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	d.next.ServeHTTP(rec, r)
	if rec.Code/100 != 2 {
		// No effect yet (the receiver refused or the handler failed):
		// answer normally, and cut the next attempt's answer instead.
		d.mu.Lock()
		delete(d.seen, key)
		d.mu.Unlock()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(fmt.Sprintf("hijack: %v", err))
	}
	_ = conn.Close()
	d.mu.Lock()
	d.dropped[key] = true
	d.mu.Unlock()
}

func (d *answerDropper) droppedKeys() map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]bool, len(d.dropped))
	for k := range d.dropped {
		out[k] = true
	}
	return out
}

// TestDrainIntoReceiverLosingAnswers: the real daemon drains 500 intents
// into a service behind the Go receiver (the handler writes its effect in
// the transaction that stores the answer) that loses the answer of one
// intent in five after the effect. Every intent ends succeeded with exactly
// one effect; each lost answer comes back as a replay, counted as `replay`,
// carrying the first answer's body.
func TestDrainIntoReceiverLosingAnswers(t *testing.T) {
	t.Parallel()
	dbURL, pool := newMigratedDB(t)
	svcPool := receiverPool(t)
	ctx := context.Background()
	rc, err := receiver.New(svcPool, receiver.Options{InTransaction: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := svcPool.Exec(ctx, `CREATE TABLE effects (id bigserial PRIMARY KEY, key text NOT NULL, body jsonb NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx := receiver.Tx(r.Context())
		if tx == nil {
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "cannot read the body", http.StatusBadRequest)
			return
		}
		var id int64
		if err := tx.QueryRow(r.Context(), `INSERT INTO effects (key, body) VALUES ($1, $2) RETURNING id`,
			r.Header.Get("Idempotency-Key"), string(body)).Scan(&id); err != nil {
			http.Error(w, "database error", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"effect_id":%d}`, id)
	})
	dropper := newAnswerDropper(rc.Wrap(handler))
	srv := httptest.NewServer(dropper)
	defer srv.Close()

	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", httpConfig(srv.URL, "", "charge_card"))
	if res := runCLI(t, nil, "check", "--config", cfgPath); res.code != 0 {
		t.Fatalf("drainer check: %s", res)
	}
	keys := enqueueCharges(t, pool, receiverDrainRows)
	d := startDaemon(t, "receiver-drain", "--config", cfgPath, "--database-url", dbURL)
	testkit.WaitFor(t, 3*time.Minute, "every intent to succeed", func() (bool, string) {
		d.requireRunning()
		c := statusCounts(t, pool)
		return c["succeeded"] == receiverDrainRows, fmt.Sprint(c)
	})
	replays := d.metric("drainer_dispatch_total", `outcome="replay"`)
	successes := d.metric("drainer_dispatch_total", `outcome="success"`)

	// Exactly one effect per intent.
	effects := map[string][]int64{}
	rows, err := svcPool.Query(ctx, `SELECT key, id FROM effects`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var id int64
		if err := rows.Scan(&k, &id); err != nil {
			t.Fatal(err)
		}
		effects[k] = append(effects[k], id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(effects) != receiverDrainRows {
		t.Errorf("%d keys took effect, want %d", len(effects), receiverDrainRows)
	}
	for _, k := range keys {
		if n := len(effects[k]); n != 1 {
			t.Errorf("key %s: %d effects, want 1", k, n)
		}
	}

	// Each row holds its own effect's answer: a replay after a lost answer
	// carries the first answer's body (seed mode: status 200 for a replay).
	dropped := dropper.droppedKeys()
	if len(dropped) == 0 {
		t.Fatal("no answer was lost: the test did not exercise a replay")
	}
	outbox, err := pool.Query(ctx, `SELECT key, status, response->>'effect_id', response_status FROM drainer.outbox`)
	if err != nil {
		t.Fatal(err)
	}
	var wrong, replayed int
	for outbox.Next() {
		var key, status string
		var effectID *string
		var respStatus *int
		if err := outbox.Scan(&key, &status, &effectID, &respStatus); err != nil {
			t.Fatal(err)
		}
		// A lost answer must come back as a replay (200); any other row
		// ends with its first write (201), or with a replay should an
		// attempt have timed out on a loaded machine after the effect.
		ids := effects[key]
		okStatus := respStatus != nil && (*respStatus == http.StatusOK || (*respStatus == http.StatusCreated && !dropped[key]))
		if status != "succeeded" || effectID == nil || len(ids) != 1 || *effectID != strconv.FormatInt(ids[0], 10) || !okStatus {
			wrong++
			if wrong <= 10 {
				t.Errorf("row %s: status %s, effect_id %v, response_status %v; want succeeded with effect %v (answer lost: %v, so 200)",
					key, status, deref(effectID), deref(respStatus), ids, dropped[key])
			}
		}
		if respStatus != nil && *respStatus == http.StatusOK {
			replayed++
		}
	}
	outbox.Close()
	if err := outbox.Err(); err != nil {
		t.Fatal(err)
	}
	// Every row's final answer was counted once: a replay as `replay`, a
	// first write as `success`; each lost answer is one of the replays.
	if int(replays) != replayed || replayed < len(dropped) {
		t.Errorf("drainer_dispatch_total{outcome=\"replay\"} = %.0f, %d rows ended with a replay, %d answers lost; want the first two equal and at least the third", replays, replayed, len(dropped))
	}
	if int(successes) != receiverDrainRows-replayed {
		t.Errorf("drainer_dispatch_total{outcome=\"success\"} = %.0f, want %d", successes, receiverDrainRows-replayed)
	}
	var records int
	if err := svcPool.QueryRow(ctx, `SELECT count(*) FROM drainer_receiver.records WHERE state = 'completed'`).Scan(&records); err != nil {
		t.Fatal(err)
	}
	if records != receiverDrainRows {
		t.Errorf("%d completed receiver records, want %d", records, receiverDrainRows)
	}
	t.Logf("drained %d intents into the receiver; %d answers lost after the effect (%.0f%%), each answered again as a replay; %.0f replays, %.0f first successes counted",
		receiverDrainRows, len(dropped), 100*float64(len(dropped))/receiverDrainRows, replays, successes)
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestDrainerReadsReceiverConflicts: the daemon reads the receiver's
// conflicts as docs/reference.md §5 says. An intent whose key another
// request holds in flight gets 409 in-flight and is retried until the
// holder finishes, then succeeds with the holder's answer as a replay (the
// handler ran once, for the holder); an intent whose key was first used
// with another body gets 409 payload-mismatch and fails at once.
func TestDrainerReadsReceiverConflicts(t *testing.T) {
	t.Parallel()
	dbURL, pool := newMigratedDB(t)
	ctx := context.Background()
	rc, err := receiver.New(receiverPool(t), receiver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	holding := make(chan struct{})
	var mu sync.Mutex
	runs := map[string]int{}
	conflicts := map[string][]string{} // Idempotency-Conflict of each 409, per key
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		runs[key]++
		n := runs[key]
		mu.Unlock()
		if r.Header.Get("X-Test-Hold") != "" {
			close(holding)
			<-gate
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%q,"run":%d}`, key, n)
	})
	wrapped := rc.Wrap(handler)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		wrapped.ServeHTTP(sw, r)
		if sw.status == http.StatusConflict {
			mu.Lock()
			key := r.Header.Get("Idempotency-Key")
			conflicts[key] = append(conflicts[key], w.Header().Get("Idempotency-Conflict"))
			mu.Unlock()
		}
	}))
	defer srv.Close()

	held := producer.Intent{Tuple: idemkey.Tuple{AgentRunID: "run-1", StepID: "held", ToolName: "charge_card"}, Payload: json.RawMessage(`{"amount_cents": 100, "currency": "EUR"}`)}
	mismatched := producer.Intent{Tuple: idemkey.Tuple{AgentRunID: "run-1", StepID: "reused", ToolName: "charge_card"}, Payload: json.RawMessage(`{"amount_cents": 200}`)}
	direct := func(in producer.Intent, body string, hold bool) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charge_card", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", in.Key())
		req.Header.Set("X-Agent-Idempotency-Tuple", in.Tuple.Encoded())
		if hold {
			req.Header.Set("X-Test-Hold", "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The same charge, formatted otherwise (the fingerprint is over the
	// canonical JSON), held in its handler; the other key used first with
	// another amount.
	type answer struct {
		status int
		body   string
	}
	holder := make(chan answer, 1)
	go func() {
		s, b := direct(held, `{"currency":"EUR","amount_cents":100}`, true)
		holder <- answer{s, b}
	}()
	<-holding
	if s, b := direct(mismatched, `{"amount_cents": 999}`, false); s != http.StatusCreated {
		t.Fatalf("first use of the reused key: %d %s", s, b)
	}
	for _, in := range []producer.Intent{held, mismatched} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, _, err := producer.EnqueueTx(ctx, tx, in)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", httpConfig(srv.URL, "", "charge_card"))
	d := startDaemon(t, "receiver-conflicts", "--config", cfgPath, "--database-url", dbURL)

	testkit.WaitFor(t, time.Minute, "the held key to be refused in flight and the reused one to fail", func() (bool, string) {
		d.requireRunning()
		mu.Lock()
		n := len(conflicts[held.Key()])
		mu.Unlock()
		r := readRow(t, pool, mismatched.Key())
		return n >= 2 && r.Status == "failed", fmt.Sprintf("%d in-flight answers; reused key %s", n, r.Status)
	})
	if r := readRow(t, pool, held.Key()); r.Status != "pending" && r.Status != "in_flight" {
		t.Errorf("held key while in flight upstream: %s, want pending (retrying)", r.Status)
	}
	close(gate)
	first := <-holder
	if first.status != http.StatusCreated {
		t.Fatalf("holder: %d %s", first.status, first.body)
	}
	testkit.WaitFor(t, time.Minute, "the held key to succeed", func() (bool, string) {
		d.requireRunning()
		r := readRow(t, pool, held.Key())
		return r.Status == "succeeded", r.Status
	})

	r := readRow(t, pool, held.Key())
	var resp map[string]any
	if r.Response == nil || json.Unmarshal([]byte(*r.Response), &resp) != nil || resp["run"] != float64(1) || resp["charge"] != held.Key() ||
		r.ResponseStatus == nil || *r.ResponseStatus != http.StatusOK || r.Attempts < 2 {
		t.Errorf("held key: response %v, status %v, attempts %d; want the holder's answer %s replayed (200) after retries", deref(r.Response), deref(r.ResponseStatus), r.Attempts, first.body)
	}
	m := readRow(t, pool, mismatched.Key())
	if m.Attempts != 1 || m.LastError == nil || !strings.Contains(strings.ToLower(*m.LastError), "409") {
		t.Errorf("reused key: attempts %d, last_error %v; want one attempt refused 409 payload-mismatch", m.Attempts, deref(m.LastError))
	}
	mu.Lock()
	heldRuns, reusedRuns := runs[held.Key()], runs[mismatched.Key()]
	heldConflicts, reusedConflicts := slices.Clone(conflicts[held.Key()]), slices.Clone(conflicts[mismatched.Key()])
	mu.Unlock()
	if heldRuns != 1 || reusedRuns != 1 {
		t.Errorf("handler runs: held key %d, reused key %d; want 1 each (the direct requests)", heldRuns, reusedRuns)
	}
	for _, c := range heldConflicts {
		if c != "in-flight" {
			t.Errorf("held key got a 409 with Idempotency-Conflict %q, want in-flight", c)
		}
	}
	if !slices.Equal(reusedConflicts, []string{"payload-mismatch"}) {
		t.Errorf("reused key: conflicts %v, want one payload-mismatch", reusedConflicts)
	}
	if n := d.metric("drainer_dispatch_total", `outcome="replay"`); n != 1 {
		t.Errorf(`drainer_dispatch_total{outcome="replay"} = %.0f, want 1`, n)
	}
	if n := d.metric("drainer_dispatch_total", `outcome="retry"`); int(n) != len(heldConflicts) {
		t.Errorf(`drainer_dispatch_total{outcome="retry"} = %.0f, want %d (one per in-flight answer)`, n, len(heldConflicts))
	}
	if n := d.metric("drainer_dispatch_total", `outcome="terminal"`); n != 1 {
		t.Errorf(`drainer_dispatch_total{outcome="terminal"} = %.0f, want 1`, n)
	}
	t.Logf("held key: %d in-flight answers retried, then replayed; reused key: last_error %q", len(heldConflicts), deref(m.LastError))
}
