//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/producer"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/tooling/mockprovider"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
)

// Soak shape: replicas, the tool the provider always refuses, the share of
// rows sent to it (percent), and the rows per enqueue transaction.
const (
	soakReplicas     = 4
	soakRejectedTool = "charge_card_rejected"
	soakRejectedPct  = 3
	soakBatch        = 1000
)

// chaosSoak: a long drain (10^6 rows in full mode) by 4 replicas under the
// fault mix of newChaosSetup (503, 529, 429 with Retry-After, answers slower
// than the adapter timeout, resets after the effect). Rows come in runs of
// 4 steps; a few per cent go to a tool the provider always answers 422:
// such a row ends failed with no effect and aborts its run, whose
// never-attempted rows end cancelled (no effect) while the attempted ones
// finish; every other row succeeds with exactly one effect. The rows are
// enqueued in batches while the replicas already drain. Reported, never
// asserted: rows/s, enqueue→terminal p50/p99 (database clock), the peak RSS
// of the largest replica and the dead tuples of the outbox at the end.
func chaosSoak(t *testing.T, seed uint64) {
	rows := chaosRows(2000, 1_000_000)
	if v := os.Getenv("DRAINER_SOAK_ROWS"); v != "" {
		// A soak of another size (e.g. where 10^6 rows would take hours).
		n, err := strconv.Atoi(v)
		if err != nil || n < 4 {
			t.Fatalf("DRAINER_SOAK_ROWS=%q: want a row count of at least 4", v)
		}
		rows = n
	}
	t.Logf("chaos seed %d (rows %d, replicas %d, full %v)", seed, rows, soakReplicas, chaosFull())
	ctx := context.Background()
	dbURL, pool := newMigratedDB(t)
	provider := mockprovider.New(mockprovider.Config{
		Fail503:           0.08,
		Fail429:           0.05,
		RetryAfterSeconds: 1,
		Fail529:           0.02,
		ResetAfterEffect:  0.03,
		Timeout:           0.01,
		TimeoutDelay:      2 * time.Second,
		VerifyTuple:       true,
		TerminalTools:     map[string]int{soakRejectedTool: 422},
		Seed:              int64(seed),
	})
	baseURL, err := provider.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(provider.Close)
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
    max_attempts: 50
    backoff: {base: 50ms, cap: 500ms, max_retry_after: 5s}
    reclaim_hold: 1s
  %s:
    adapter: provider
    class: key_idempotent
    max_attempts: 50
    backoff: {base: 50ms, cap: 500ms, max_retry_after: 5s}
    reclaim_hold: 1s
`, baseURL, soakRejectedTool)
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", cfg)
	if res := runCLI(t, nil, "check", "--config", cfgPath); res.code != 0 {
		t.Fatalf("drainer check: %s", res)
	}
	s := &chaosSetup{dbURL: dbURL, pool: pool, provider: provider, cfgPath: cfgPath,
		keys: make([]string, 0, rows), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}

	replicas := make([]*daemon, soakReplicas)
	for i := range replicas {
		replicas[i] = s.start(t, "replica-"+strconv.Itoa(i))
	}
	start := time.Now()
	enq := soakEnqueue(t, s, rows)
	t.Logf("enqueued %d rows (%d to %s, in %d runs) in %s while draining; now %v",
		rows, enq.rejected, soakRejectedTool, enq.rejectedRuns, time.Since(start).Round(time.Millisecond), statusCounts(t, pool))

	soakWaitSettled(t, s, replicas)
	elapsed := time.Since(start)

	// A failed row aborts its run (docs/reference.md §6): the run's never-attempted
	// rows end cancelled, the attempted ones finish; nothing here names a
	// compensation, so every such saga ends done. Rows of the other runs
	// all succeed. (Effects of failed and cancelled rows: chaosCheck.)
	testkit.WaitFor(t, chaosSettleBound(), "every aborted run's saga done", func() (bool, string) {
		var open int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM drainer.runs WHERE saga_state IS DISTINCT FROM 'done'`).Scan(&open); err != nil {
			t.Fatal(err)
		}
		return open == 0, fmt.Sprintf("%d sagas not done", open)
	})
	soakCheckOutcomes(t, s, rows, enq)

	// Enqueue→terminal latency of every row, on the database clock.
	var p50, p99 float64
	if err := pool.QueryRow(ctx, `SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), 0),
		       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), 0)
		  FROM (SELECT extract(epoch FROM updated_at - created_at) * 1000 AS ms
		          FROM drainer.outbox WHERE status IN ('succeeded', 'failed', 'cancelled')) l`).Scan(&p50, &p99); err != nil {
		t.Fatal(err)
	}

	// Peak RSS of each replica just before it is stopped; every replica
	// exits 0 on SIGTERM.
	var maxRSS int64
	for _, r := range replicas {
		r.requireRunning()
		kib, err := vmHWMKiB(r.pid())
		if err != nil {
			t.Errorf("%s: %v", r.name, err)
		}
		t.Logf("%s (pid %d): VmHWM %.1f MiB", r.name, r.pid(), float64(kib)/1024)
		maxRSS = max(maxRSS, kib)
		r.signal(syscall.SIGTERM)
	}
	for _, r := range replicas {
		if code := r.exitCode(60 * time.Second); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0", r.name, code)
		}
	}

	// The dead row versions the drain left, then what is left of them once
	// the rotation took the drained generations away (the replicas stopped
	// before it could: it closes a generation only once its backlog has
	// drained).
	dead := soakDeadTuples(t, s)
	rotated := soakRotate(t, s)
	hotAfter, restAfter := soakDeadVersions(t, s)
	t.Logf("soak: rows=%d rows_per_s=%.0f p50_ms=%.0f p99_ms=%.0f max_rss_mib=%.1f dead_tuples=%d dead_tuples_after_rotation=%d (rotation %.1fs)",
		rows, float64(rows)/elapsed.Seconds(), p50, p99, float64(maxRSS)/1024, dead, hotAfter+restAfter, rotated.Seconds())
	// The hot generations were truncated: none of their dead versions
	// remains. The settled partition and intents are never rewritten by the
	// drain; a move cut short (a replica stopped in the middle of one)
	// leaves at most one chunk of inserted versions there, dead until
	// vacuumed.
	if hotAfter > 0 || restAfter > int64(store.DefaultRotation.Chunk) {
		t.Errorf("once the rotation settled: %d dead row versions in the hot generations (want 0: truncated) and %d in the settled partition and intents (want at most one move, %d)",
			hotAfter, restAfter, store.DefaultRotation.Chunk)
	}
	t.Logf("soak provider: %+v", provider.Snapshot())
	chaosResults.add(chaosCheck(t, "soak", s, elapsed))
}

// soakEnqueued says what soakEnqueue enqueued besides the keys.
type soakEnqueued struct {
	rejected     int // rows of the rejected tool
	rejectedRuns int // runs with at least one such row
}

// soakEnqueue enqueues n intents, runs of 4 steps, in batches of soakBatch
// (a whole number of runs, so a run commits at once) with
// producer.EnqueueBatchTx: drainer.enqueue derives each key, which must
// equal idemkey's. It appends the keys to s.keys.
func soakEnqueue(t *testing.T, s *chaosSetup, n int) soakEnqueued {
	t.Helper()
	const steps = 4
	ctx := context.Background()
	var out soakEnqueued
	ins := make([]producer.Intent, 0, soakBatch)
	runRejected := false
	for lo := 0; lo < n; lo += soakBatch {
		ins = ins[:0]
		for i := lo; i < min(lo+soakBatch, n); i++ {
			if i%steps == 0 {
				runRejected = false
			}
			tool := "charge_card"
			if s.rng.IntN(100) < soakRejectedPct {
				tool = soakRejectedTool
				out.rejected++
				if !runRejected {
					out.rejectedRuns++
					runRejected = true
				}
			}
			payload, _ := json.Marshal(map[string]any{"amount_cents": 100 + i%10000, "currency": "EUR", "n": i})
			ins = append(ins, producer.Intent{
				Tuple: idemkey.Tuple{
					AgentRunID:    fmt.Sprintf("soak-run-%07d", i/steps),
					StepID:        fmt.Sprintf("step-%d", i%steps),
					ToolName:      tool,
					BusinessScope: fmt.Sprintf("customer-%d", i%101),
				},
				Payload: payload,
			})
		}
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			res, err := producer.EnqueueBatchTx(ctx, tx, ins)
			if err != nil {
				return err
			}
			if len(res) != len(ins) {
				return fmt.Errorf("%d answers for %d intents", len(res), len(ins))
			}
			for i, r := range res {
				if !r.Created {
					return fmt.Errorf("intent %d: key %s not created", lo+i, r.Key)
				}
				if want := ins[i].Key(); r.Key != want {
					return fmt.Errorf("intent %d: key %s, want %s (idemkey)", lo+i, r.Key, want)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		for _, r := range ins {
			s.keys = append(s.keys, r.Key())
		}
	}
	return out
}

// soakCheckOutcomes checks the end state of the soak's rows by tool,
// whether their run was aborted, and status.
func soakCheckOutcomes(t *testing.T, s *chaosSetup, rows int, enq soakEnqueued) {
	t.Helper()
	ctx := context.Background()
	q, err := s.pool.Query(ctx, `
		WITH runs AS (SELECT agent_run_id, bool_or(status = 'failed') AS aborted
		                FROM drainer.outbox GROUP BY agent_run_id)
		SELECT o.tool_name, r.aborted, o.status,
		       o.status <> 'cancelled' OR (o.attempts = 0 AND o.cancel_cause IS NOT DISTINCT FROM 'run_aborted') AS clean,
		       o.status <> 'failed' OR (o.response_status IS NOT DISTINCT FROM 422 AND o.response IS NULL) AS refused,
		       count(*)
		  FROM drainer.outbox o JOIN runs r USING (agent_run_id)
		 GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5`)
	if err != nil {
		t.Fatal(err)
	}
	var summary []string
	byStatus := map[string]int{}
	for q.Next() {
		var tool, st string
		var aborted, clean, refused bool
		var n int
		if err := q.Scan(&tool, &aborted, &st, &clean, &refused, &n); err != nil {
			t.Fatal(err)
		}
		byStatus[st] += n
		summary = append(summary, fmt.Sprintf("%s/aborted=%v/%s:%d", tool, aborted, st, n))
		ok := false
		switch {
		case tool == "charge_card" && !aborted:
			ok = st == "succeeded"
		case tool == "charge_card":
			ok = st == "succeeded" || st == "cancelled"
		case tool == soakRejectedTool && aborted:
			ok = st == "failed" || st == "cancelled"
		}
		if !ok {
			t.Errorf("%d %s rows (run aborted: %v) ended %s", n, tool, aborted, st)
		}
		if !clean {
			t.Errorf("%d %s rows cancelled although attempted, or not by their run's abort", n, tool)
		}
		if !refused {
			t.Errorf("%d %s rows failed without the provider's 422 as their last answer, or with a response stored", n, tool)
		}
	}
	q.Close()
	if err := q.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("soak outcomes: %s", strings.Join(summary, " "))
	var failedRuns, abortedRuns int
	if err := s.pool.QueryRow(ctx, `SELECT (SELECT count(DISTINCT agent_run_id) FROM drainer.outbox WHERE status = 'failed'),
		       (SELECT count(*) FROM drainer.runs)`).Scan(&failedRuns, &abortedRuns); err != nil {
		t.Fatal(err)
	}
	if failedRuns != enq.rejectedRuns || abortedRuns != enq.rejectedRuns {
		t.Errorf("%d runs with a failed row and %d aborted runs, want both %d (the runs with a %s row)",
			failedRuns, abortedRuns, enq.rejectedRuns, soakRejectedTool)
	}
}

// soakWaitSettled is waitSettled for a large table: it polls with an
// index-backed EXISTS (a status count scans the whole outbox) once a
// second in full mode, checks that every replica is still running, and
// logs progress now and then.
func soakWaitSettled(t *testing.T, s *chaosSetup, replicas []*daemon) {
	t.Helper()
	ctx := context.Background()
	every, logEvery := 100*time.Millisecond, 30*time.Second
	if chaosFull() {
		every = time.Second
	}
	deadline := time.Now().Add(chaosSettleBound())
	nextLog := time.Now().Add(logEvery)
	for {
		for _, r := range replicas {
			r.requireRunning()
		}
		var open bool
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM drainer.outbox WHERE status = 'pending')
			OR EXISTS (SELECT 1 FROM drainer.outbox WHERE status = 'in_flight')`).Scan(&open); err != nil {
			t.Fatal(err)
		}
		if !open {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for every row terminal or parked; last: %v",
				chaosSettleBound(), statusCounts(t, s.pool))
		}
		if time.Now().After(nextLog) {
			t.Logf("soak progress: %v", statusCounts(t, s.pool))
			nextLog = time.Now().Add(logEvery)
		}
		time.Sleep(every)
	}
}

// vmHWMKiB returns the peak resident set size (VmHWM) of process pid, in KiB.
func vmHWMKiB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest) // "12345 kB"
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("/proc/%d/status: unexpected VmHWM line %q", pid, line)
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmHWM line", pid)
}

// soakRotate runs the queue's rotation to its end and returns how long it
// took: the engines' rules (store.DefaultRotation), except that the
// current generation is closed as soon as it holds a settled row and
// nothing due or in flight, as the engines close it once it holds
// IdleRows settled rows or is FlipAge old; so every drained row ends in
// the settled partition and every hot generation is truncated. Its session
// is named like the engines', so that soakDeadTuples waits for it to exit
// and report its statistics.
func soakRotate(t *testing.T, s *chaosSetup) time.Duration {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "drainer"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	st := store.MustNew("drainer")
	r := store.DefaultRotation
	r.IdleRows = 1
	start := time.Now()
	for deadline := start.Add(chaosSettleBound()); ; {
		step, err := st.RotateQueue(ctx, conn, r)
		if err != nil {
			t.Fatal(err)
		}
		if step.More() {
			continue
		}
		done, err := st.RotationSettled(ctx, conn, r)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rotation did not settle within %s (last step: %s)", chaosSettleBound(), step.Kind)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// soakDeadVersions counts the dead row versions on disk (pgstattuple
// reads every page) in the queue's hot generations, and in its settled
// partition and intents. The statistics will not do once generations are
// truncated: n_dead_tup goes on counting, for a generation truncated
// since, the deletes other sessions report after the truncation.
func soakDeadVersions(t *testing.T, s *chaosSetup) (hot, rest int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pgstattuple`); err != nil {
		t.Fatal(err)
	}
	var where string
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(d) FILTER (WHERE relname LIKE 'queue_g%'), 0)::bigint,
		       coalesce(sum(d) FILTER (WHERE relname NOT LIKE 'queue_g%'), 0)::bigint,
		       coalesce(string_agg(relname || ' ' || d, ', ' ORDER BY relname) FILTER (WHERE d > 0), 'none')
		  FROM (SELECT c.relname, (pgstattuple(c.oid)).dead_tuple_count AS d
		          FROM pg_class c
		         WHERE c.oid = 'drainer.intents'::regclass
		            OR c.oid IN (SELECT relid FROM pg_partition_tree('drainer.queue') WHERE isleaf)) x`).Scan(&hot, &rest, &where); err != nil {
		t.Fatal(err)
	}
	t.Logf("drainer.queue (its generations) and intents on disk: %d dead row versions (%s)", hot+rest, where)
	return hot, rest
}

// soakDeadTuples returns n_dead_tup of the tables behind drainer.outbox
// (the queue's generations and intents) once the replicas'
// sessions are gone (a backend flushes its statistics when it exits),
// after flushing this session's statistics where the server can (PG15+).
func soakDeadTuples(t *testing.T, s *chaosSetup) int64 {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); ; {
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'drainer'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Logf("%d drainer sessions still open 30s after the replicas exited; dead tuples may be undercounted", n)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var version int
	if err := s.pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version >= 150000 {
		if _, err := s.pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
	}
	var dead, live, autovacuums int64
	var where string
	if err := s.pool.QueryRow(ctx, `SELECT sum(n_dead_tup)::bigint, sum(n_live_tup)::bigint, sum(autovacuum_count)::bigint,
		       coalesce(string_agg(relname || ' ' || n_dead_tup, ', ' ORDER BY relname) FILTER (WHERE n_dead_tup > 0), 'none')
		FROM pg_stat_user_tables WHERE relid = 'drainer.intents'::regclass
		   OR relid IN (SELECT relid FROM pg_partition_tree('drainer.queue') WHERE isleaf)`).Scan(&dead, &live, &autovacuums, &where); err != nil {
		t.Fatal(err)
	}
	t.Logf("drainer.queue (its generations) and intents: n_dead_tup %d (%s), n_live_tup %d, autovacuum_count %d", dead, where, live, autovacuums)
	return dead
}
