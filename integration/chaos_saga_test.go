//go:build integration

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/mockprovider"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// chaosSagaStorm: many runs fail at once; their compensations go to a
// provider that refuses those of half the runs (422: they end
// compensation_failed, the saga halts) and undoes the others (compensated,
// each compensation once, in reverse seq order). Alongside, a non_idempotent
// route whose provider applies the effect and then drops the connection:
// those rows end outcome_unknown, never with two effects.
func chaosSagaStorm(t *testing.T, seed uint64) {
	runs := chaosRows(200, 3000)
	const steps = 3
	t.Logf("chaos seed %d (runs %d, full %v)", seed, runs, chaosFull())
	dbURL, pool := newMigratedDB(t)
	provider := mockprovider.New(mockprovider.Config{
		Seed:              int64(seed),
		Fail503:           0.05,
		Fail429:           0.05,
		RetryAfterSeconds: 1,
		VerifyTuple:       true,
		TerminalTools:     map[string]int{"fail_step": 422, "unbook_b": 422},
	})
	baseURL, err := provider.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(provider.Close)
	dropper := mockprovider.New(mockprovider.Config{Seed: int64(seed), ResetAfterEffect: 1, VerifyTuple: true})
	dropURL, err := dropper.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dropper.Close)

	cfg := fmt.Sprintf(`workers: 16
lease: 8s
adapters:
  provider:
    type: http
    url: %s/{tool_name}
    timeout: 2s
  dropper:
    type: http
    url: %s/{tool_name}
    timeout: 2s
    breaker: {consecutive_failures: 0}   # every call is dropped: keep the breaker out of the way
routes:
  book_a: {adapter: provider, compensation: unbook_a, max_attempts: 30, backoff: {base: 50ms, cap: 300ms, max_retry_after: 5s}, reclaim_hold: 1s}
  book_b: {adapter: provider, compensation: unbook_b, max_attempts: 30, backoff: {base: 50ms, cap: 300ms, max_retry_after: 5s}, reclaim_hold: 1s}
  fail_step: {adapter: provider, max_attempts: 30, backoff: {base: 50ms, cap: 300ms, max_retry_after: 5s}, reclaim_hold: 1s}
  unbook_a: {adapter: provider, max_attempts: 30, backoff: {base: 50ms, cap: 300ms, max_retry_after: 5s}, reclaim_hold: 1s}
  unbook_b: {adapter: provider, max_attempts: 30, backoff: {base: 50ms, cap: 300ms, max_retry_after: 5s}, reclaim_hold: 1s}
  send_sms: {adapter: dropper, class: non_idempotent, max_attempts: 5, backoff: {base: 50ms, cap: 300ms, max_retry_after: 5s}, reclaim_hold: 1s}
`, baseURL, dropURL)
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", cfg)
	if res := runCLI(t, nil, "check", "--config", cfgPath); res.code != 0 {
		t.Fatalf("drainer check: %s", res)
	}
	ctx := context.Background()
	var keys []string
	enqueue := func(run, step, tool string) string {
		t.Helper()
		var key string
		var created bool
		if err := pool.QueryRow(ctx, "SELECT key, created FROM drainer.enqueue($1, $2, $3, 'scope', $4::jsonb)",
			run, step, tool, fmt.Sprintf(`{"run":%q,"step":%q}`, run, step)).Scan(&key, &created); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
		return key
	}
	runName := func(i int) string { return fmt.Sprintf("storm-%05d", i) }
	forward := map[string][]string{} // run -> forward keys in seq order
	for i := range runs {
		tool := "book_a"
		if i%2 == 1 {
			tool = "book_b"
		}
		for s := range steps {
			forward[runName(i)] = append(forward[runName(i)], enqueue(runName(i), strconv.Itoa(s), tool))
		}
	}
	smsRows := runs / 4
	var smsKeys []string
	for i := range smsRows {
		smsKeys = append(smsKeys, enqueue(fmt.Sprintf("sms-%05d", i), "0", "send_sms"))
	}

	replicas := make([]*daemon, 3)
	for i := range replicas {
		replicas[i] = startDaemon(t, "replica-"+strconv.Itoa(i), "--config", cfgPath, "--database-url", dbURL, "--shutdown-timeout", "10s")
	}
	start := time.Now()
	testkit.WaitFor(t, chaosSettleBound(), "every forward step to succeed", func() (bool, string) {
		c := statusCounts(t, pool)
		return c["succeeded"] == runs*steps, fmt.Sprint(c)
	})
	// Every run fails at once.
	for i := range runs {
		enqueue(runName(i), strconv.Itoa(steps), "fail_step")
	}
	aRuns, bRuns := (runs+1)/2, runs/2
	testkit.WaitFor(t, chaosSettleBound(), "every saga compensated or halted", func() (bool, string) {
		c := statusCounts(t, pool)
		return c["compensated"] == aRuns*steps && c["compensation_failed"] == bRuns &&
			c["pending"] == 0 && c["in_flight"] == 0, fmt.Sprint(c)
	})
	elapsed := time.Since(start)

	s := &chaosSetup{dbURL: dbURL, pool: pool, provider: provider, keys: keys[:0:0],
		rng: rand.New(rand.NewPCG(seed, seed))}
	for _, k := range keys {
		if !slices.Contains(smsKeys, k) {
			s.keys = append(s.keys, k)
		}
	}
	v := chaosCheck(t, "saga_storm", s, elapsed)
	v.rows = len(keys)

	// Compensations: a-runs undone once each in reverse seq order; b-runs
	// halted after the first refused compensation, with no effect.
	comps := provider.Compensations()
	for i := range runs {
		run := runName(i)
		got := comps[run]
		if i%2 == 0 {
			want := slices.Clone(forward[run])
			slices.Reverse(want)
			if !slices.Equal(got, want) {
				v.duplicates++
				t.Errorf("run %s: compensations applied for %v, want %v (each once, reverse seq order)", run, got, want)
			}
		} else if len(got) != 0 {
			t.Errorf("run %s: compensations applied for %v, want none (refused)", run, got)
		}
	}
	var bComp int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM drainer.outbox WHERE kind = 'compensation' AND tool_name = 'unbook_b'`).Scan(&bComp); err != nil {
		t.Fatal(err)
	}
	if bComp != bRuns {
		t.Errorf("%d unbook_b compensation rows, want %d (one per halted saga: none after the refused one)", bComp, bRuns)
	}

	// non_idempotent rows whose call was dropped after the effect.
	for _, k := range smsKeys {
		r := readRow(t, pool, k)
		n := dropper.Effects(k)
		if n > 1 {
			v.duplicates++
			t.Errorf("send_sms %s: %d effects", k, n)
		}
		if r.Status != "outcome_unknown" && r.Status != "succeeded" {
			t.Errorf("send_sms %s: status %s, want outcome_unknown", k, r.Status)
		}
		if r.Status == "outcome_unknown" && r.Attempts != 1 {
			t.Errorf("send_sms %s: outcome_unknown after %d attempts, want 1 (never retried blindly)", k, r.Attempts)
		}
	}
	if ra := dropper.RetryAfterViolations(); len(ra) > 0 {
		v.retryAfterViolations += len(ra)
	}
	chaosResults.add(v)
	for _, r := range replicas {
		r.signal(syscall.SIGTERM)
	}
	for _, r := range replicas {
		r.wait(30 * time.Second)
	}
}
