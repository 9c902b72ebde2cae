//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/producer"
	"github.com/drainer-io/drainer/tooling/mockprovider"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const e2eRows = 2000

// TestThreeReplicasSurviveSIGKILL drains 2,000 rows with three replicas
// against a faulty idempotent provider, SIGKILLs one replica a third of the
// way, and checks that every row succeeds with exactly one effect.
func TestThreeReplicasSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	dbURL, pool := newMigratedDB(t)

	provider := mockprovider.New(mockprovider.Config{
		Fail503:           0.10,
		Fail429:           0.05,
		RetryAfterSeconds: 1,
		Fail529:           0.03,
		ResetAfterEffect:  0.02,
		Timeout:           0.01,
		TimeoutDelay:      2 * time.Second, // beyond the adapter timeout
		VerifyTuple:       true,
		Seed:              20240601,
	})
	baseURL, err := provider.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(provider.Close)

	// lease must exceed the adapter timeout plus 5s.
	cfg := fmt.Sprintf(`workers: 16
lease: 7s
adapters:
  provider:
    type: http
    url: %s/{tool_name}
    timeout: 1s
    breaker: {consecutive_failures: 5, open_for: 1s}
routes:
  charge_card:
    adapter: provider
    class: key_idempotent
    max_attempts: 20
    backoff: {base: 50ms, cap: 500ms, max_retry_after: 5s}
    reclaim_hold: 1s
`, baseURL)
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", cfg)
	if res := runCLI(t, nil, "check", "--config", cfgPath); res.code != 0 {
		t.Fatalf("drainer check: %s", res)
	}

	keys := enqueueCharges(t, pool, e2eRows)

	replicas := make([]*daemon, 3)
	for i := range replicas {
		replicas[i] = startDaemon(t, "replica-"+strconv.Itoa(i),
			"--config", cfgPath, "--database-url", dbURL, "--shutdown-timeout", "10s")
	}
	start := replicas[0].started

	// SIGKILL one replica once about a third of the rows succeeded, at a
	// moment it holds rows in flight (not while its breaker is open, say):
	// their leases are what the survivors must reclaim.
	victim := replicas[0]
	var beforeKill int
	testkit.WaitFor(t, 2*time.Minute, "a third of the rows to succeed, the victim holding rows in flight", func() (bool, string) {
		for _, r := range replicas {
			r.requireRunning()
		}
		c := statusCounts(t, pool)
		beforeKill = c["succeeded"]
		if beforeKill < e2eRows/3 {
			return false, fmt.Sprint(c)
		}
		held := inFlightOf(t, pool, victim.pid())
		return held >= 4, fmt.Sprintf("%v; %s holds %d", c, victim.name, held)
	})
	victim.signal(syscall.SIGKILL)
	killedAt := time.Since(start)
	if err := victim.wait(10 * time.Second); err == nil {
		t.Fatalf("%s exited cleanly before the SIGKILL reached it", victim.name)
	}
	// A statement the victim sent just before dying (a completion batch)
	// still runs to its end in Postgres: count its leases once that settled.
	stranded := settledInFlightOf(t, pool, victim.pid())
	t.Logf("SIGKILLed %s (pid %d) at %s, %d rows succeeded (%.0f rows/s until then); %d rows stranded in_flight under its lease; now %v",
		victim.name, victim.pid(), killedAt.Round(time.Millisecond), beforeKill, float64(beforeKill)/killedAt.Seconds(), stranded, statusCounts(t, pool))
	if stranded == 0 {
		t.Errorf("the killed replica held no in_flight row: the test did not exercise lease reclaim")
	}

	survivors := replicas[1:]
	testkit.WaitFor(t, 3*time.Minute, "every row to succeed", func() (bool, string) {
		for _, r := range survivors {
			r.requireRunning()
		}
		c := statusCounts(t, pool)
		return c["succeeded"] == e2eRows, fmt.Sprint(c)
	})
	elapsed := time.Since(start)
	rate := float64(e2eRows) / elapsed.Seconds()
	t.Logf("E2E: drained %d rows in %s (%.0f rows/s) with 3 replicas, one SIGKILLed; the tail includes the %s lease of the stranded rows and their 1s reclaim hold (reclaim_hold, the provider's Retry-After)",
		e2eRows, elapsed.Round(100*time.Millisecond), rate, "7s")
	fmt.Printf("E2E: drained %d rows in %.1fs (%.0f rows/s)\n", e2eRows, elapsed.Seconds(), rate)

	// Every row succeeded, none is left in_flight, and each holds the
	// provider's answer for its own key.
	if c := statusCounts(t, pool); c["succeeded"] != e2eRows || len(c) != 1 {
		t.Errorf("status counts = %v, want all %d succeeded", c, e2eRows)
	}
	var badResponses int
	err = pool.QueryRow(context.Background(), `SELECT count(*) FROM drainer.outbox
		WHERE response IS NULL OR response_status IS DISTINCT FROM 200`).Scan(&badResponses)
	if err != nil {
		t.Fatal(err)
	}
	if badResponses != 0 {
		t.Errorf("%d rows lack a stored 200 answer", badResponses)
	}
	rows, err := pool.Query(context.Background(), `SELECT key, response->>'id', attempts FROM drainer.outbox`)
	if err != nil {
		t.Fatal(err)
	}
	maxAttempts := 0
	var mismatched int
	for rows.Next() {
		var key, id string
		var attempts int
		if err := rows.Scan(&key, &id, &attempts); err != nil {
			t.Fatal(err)
		}
		if id != mockprovider.ResponseID(key) {
			mismatched++
		}
		maxAttempts = max(maxAttempts, attempts)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if mismatched > 0 {
		t.Errorf("%d rows hold a response id that is not the provider's for their key", mismatched)
	}

	// Exactly one effect per row, never two keys for one tuple.
	var notOnce int
	for _, k := range keys {
		if n := provider.Effects(k); n != 1 {
			notOnce++
			if notOnce <= 10 {
				t.Errorf("key %s: %d effects, want 1", k, n)
			}
		}
	}
	if notOnce > 10 {
		t.Errorf("... %d keys in all without exactly one effect", notOnce)
	}
	if got := provider.TotalEffects(); got != e2eRows {
		t.Errorf("provider applied %d effects, want %d", got, e2eRows)
	}
	if d := provider.DuplicateEffects(); len(d) != 0 {
		t.Errorf("duplicate effects for %d keys: %v", len(d), d[:min(len(d), 10)])
	}
	if m := provider.MultiKeyTuples(); len(m) != 0 {
		t.Errorf("%d tuples were sent under more than one key: %v", len(m), m[:min(len(m), 10)])
	}
	snap := provider.Snapshot()
	t.Logf("provider: %+v; max attempts of a row: %d", snap, maxAttempts)
	if snap.BadRequests != 0 {
		t.Errorf("provider answered %d bad requests (missing or mismatched key/tuple headers)", snap.BadRequests)
	}

	// The survivors reclaimed the killed replica's leases.
	var reclaimed float64
	for _, r := range survivors {
		reclaimed += r.metric("drainer_leases_expired_total")
	}
	t.Logf("survivors reclaimed %.0f expired leases", reclaimed)
	if reclaimed < float64(stranded) {
		t.Errorf("drainer_leases_expired_total over the survivors = %.0f, want at least the %d rows stranded by the killed replica", reclaimed, stranded)
	}

	// SIGTERM the survivors: both exit 0.
	for _, r := range survivors {
		r.signal(syscall.SIGTERM)
	}
	for _, r := range survivors {
		if code := r.exitCode(30 * time.Second); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0\noutput:\n%s", r.name, code, tail(r.stderr.String(), 4000))
		}
	}
	if c := statusCounts(t, pool); c["in_flight"] != 0 {
		t.Errorf("rows left in_flight after shutdown: %v", c)
	}
}

// enqueueCharges enqueues n charge_card intents, each its own run and step,
// in batches, and returns their keys.
func enqueueCharges(t *testing.T, pool *pgxpool.Pool, n int) []string {
	t.Helper()
	ctx := context.Background()
	var keys []string
	const batch = 500
	for lo := 0; lo < n; lo += batch {
		ins := make([]producer.Intent, 0, batch)
		for i := lo; i < min(lo+batch, n); i++ {
			payload, _ := json.Marshal(map[string]any{"amount_cents": 100 + i, "currency": "EUR", "n": i})
			ins = append(ins, producer.Intent{
				Tuple: idemkey.Tuple{
					AgentRunID:    fmt.Sprintf("run-%04d", i/4),
					StepID:        fmt.Sprintf("step-%d", i%4),
					ToolName:      "charge_card",
					BusinessScope: fmt.Sprintf("customer-%d", i%37),
				},
				Payload: payload,
			})
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := producer.EnqueueBatchTx(ctx, tx, ins)
			if err != nil {
				return err
			}
			for i, r := range res {
				if !r.Created {
					return fmt.Errorf("intent %d: key %s not created", lo+i, r.Key)
				}
				if want := ins[i].Key(); r.Key != want {
					return fmt.Errorf("intent %d: key %s, want %s (idemkey)", lo+i, r.Key, want)
				}
				keys = append(keys, r.Key)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
	}
	return keys
}

// inFlightOf counts the rows leased by the drainer process pid.
func inFlightOf(t *testing.T, pool *pgxpool.Pool, pid int) int {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(),
		`SELECT count(*) FROM drainer.outbox WHERE status = 'in_flight' AND leased_by LIKE '%:' || $1::text`, strconv.Itoa(pid)).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// settledInFlightOf is inFlightOf once it stayed the same for half a second
// (at most a few seconds: far less than the lease, so no reclaim interferes).
func settledInFlightOf(t *testing.T, pool *pgxpool.Pool, pid int) int {
	t.Helper()
	n := inFlightOf(t, pool, pid)
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		m := inFlightOf(t, pool, pid)
		if m == n {
			return n
		}
		t.Logf("rows in_flight under the killed replica's lease went from %d to %d after its death", n, m)
		n = m
	}
	return n
}
