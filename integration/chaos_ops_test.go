//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/producer"
	"github.com/drainer-io/drainer/tooling/mockprovider"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
)

// The tools of the operator_actions scenario.
const (
	opsCharge  = "charge_card"  // adapter payments, compensated by refund_card
	opsRefund  = "refund_card"  // adapter payments
	opsReceipt = "send_receipt" // adapter notify; its route is removed and restored
	opsSeat    = "reserve_seat" // adapter notify, 2 attempts: some rows fail
)

// opsRetryAfter is the Retry-After (seconds) of the provider's 429 answers:
// long enough that floors are in force while the operator acts.
const opsRetryAfter = 4

// opsActor is the --actor of every operator command of the scenario.
const opsActor = "chaos-operator"

// opsConfig is the scenario's config: two adapters in front of the same
// provider, and the route of send_receipt only withReceipt.
func opsConfig(baseURL string, withReceipt bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `workers: 8
lease: 12s
unrouted_recheck: 10s
adapters:
  payments:
    type: http
    url: %[1]s/{tool_name}
    timeout: 5s
    breaker: {consecutive_failures: 0}
  notify:
    type: http
    url: %[1]s/{tool_name}
    timeout: 5s
    breaker: {consecutive_failures: 0}
routes:
  %[2]s: {adapter: payments, compensation: %[3]s, max_attempts: 50, backoff: {base: 50ms, cap: 500ms, max_retry_after: 10s}, reclaim_hold: 4s}
  %[3]s: {adapter: payments, max_attempts: 50, backoff: {base: 50ms, cap: 500ms, max_retry_after: 10s}, reclaim_hold: 4s}
  %[4]s: {adapter: notify, max_attempts: 2, backoff: {base: 50ms, cap: 500ms, max_retry_after: 10s}, reclaim_hold: 4s}
`, baseURL, opsCharge, opsRefund, opsSeat)
	if withReceipt {
		fmt.Fprintf(&b, "  %s: {adapter: notify, max_attempts: 50, backoff: {base: 50ms, cap: 500ms, max_retry_after: 10s}, reclaim_hold: 4s}\n", opsReceipt)
	}
	return b.String()
}

// opsTap is a reverse proxy between the daemons and the provider that
// records, per idempotency key, how many requests arrived and when the
// provider last answered it 429.
type opsTap struct {
	mu       sync.Mutex
	requests map[string]int
	last429  map[string]time.Time
}

func newOpsTap(t *testing.T, providerURL string) (*opsTap, string) {
	t.Helper()
	target, err := url.Parse(providerURL)
	if err != nil {
		t.Fatal(err)
	}
	tp := &opsTap{requests: map[string]int{}, last429: map[string]time.Time{}}
	transport := &http.Transport{MaxIdleConnsPerHost: 64}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = transport
	rp.ErrorLog = log.New(io.Discard, "", 0)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.StatusCode == http.StatusTooManyRequests {
			tp.mu.Lock()
			tp.last429[resp.Request.Header.Get("Idempotency-Key")] = time.Now()
			tp.mu.Unlock()
		}
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tp.mu.Lock()
		tp.requests[r.Header.Get("Idempotency-Key")]++
		tp.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(transport.CloseIdleConnections)
	t.Cleanup(srv.Close)
	return tp, srv.URL
}

// requestsFor returns how many requests for key reached the provider.
func (tp *opsTap) requestsFor(key string) int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.requests[key]
}

// underRetryAfter reports whether the provider's last 429 for key asked to
// wait beyond at.
func (tp *opsTap) underRetryAfter(key string, at time.Time) bool {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	last, ok := tp.last429[key]
	return ok && last.Add(opsRetryAfter*time.Second).After(at)
}

// opsRow is what the scenario remembers of a forward row it enqueued.
type opsRow struct{ run, tool string }

// opsScenario is the state of one operator_actions run.
type opsScenario struct {
	t        *testing.T
	s        *chaosSetup
	tap      *opsTap
	f        int // size factor: 1 short, 10 full
	cfgFull  string
	cfgNoRcp string
	replicas []*daemon
	start    time.Time // the replicas started

	rows map[string]opsRow   // forward key -> row
	runs map[string][]string // run -> forward keys
	// cancelled: keys `drainer cancel` cancelled, with their attempts then.
	cancelled map[string]int
	// aborted: runs `drainer abort` aborted.
	aborted map[string]bool
	// requeuedFailed: failed rows requeued with a fresh attempt budget.
	requeuedFailed map[string]bool
}

// opsOrders returns the tuples of runs order runs: charges charge_card
// steps and receipts send_receipt steps each.
func opsOrders(prefix string, runs, charges, receipts int) []idemkey.Tuple {
	var out []idemkey.Tuple
	for i := range runs {
		run := fmt.Sprintf("%s-%05d", prefix, i)
		scope := fmt.Sprintf("customer-%d", i%29)
		for s := range charges {
			out = append(out, idemkey.Tuple{AgentRunID: run, StepID: fmt.Sprintf("charge-%d", s), ToolName: opsCharge, BusinessScope: scope})
		}
		for s := range receipts {
			out = append(out, idemkey.Tuple{AgentRunID: run, StepID: fmt.Sprintf("receipt-%d", s), ToolName: opsReceipt, BusinessScope: scope})
		}
	}
	return out
}

// opsSeats returns n reserve_seat tuples, each its own run.
func opsSeats(prefix string, n int) []idemkey.Tuple {
	out := make([]idemkey.Tuple, n)
	for i := range out {
		out[i] = idemkey.Tuple{AgentRunID: fmt.Sprintf("%s-%05d", prefix, i), StepID: "seat", ToolName: opsSeat, BusinessScope: fmt.Sprintf("show-%d", i%7)}
	}
	return out
}

// enqueue enqueues tuples with the Go producer and returns their keys.
func (o *opsScenario) enqueue(tuples []idemkey.Tuple) []string {
	o.t.Helper()
	ctx := context.Background()
	var keys []string
	const batch = 500
	for lo := 0; lo < len(tuples); lo += batch {
		ins := make([]producer.Intent, 0, batch)
		for i, tu := range tuples[lo:min(lo+batch, len(tuples))] {
			payload, _ := json.Marshal(map[string]any{"run": tu.AgentRunID, "step": tu.StepID, "n": lo + i})
			ins = append(ins, producer.Intent{Tuple: tu, Payload: payload})
		}
		err := pgx.BeginFunc(ctx, o.s.pool, func(tx pgx.Tx) error {
			res, err := producer.EnqueueBatchTx(ctx, tx, ins)
			if err != nil {
				return err
			}
			for i, r := range res {
				if !r.Created {
					return fmt.Errorf("intent %+v: key %s not created", ins[i].Tuple, r.Key)
				}
				keys = append(keys, r.Key)
			}
			return nil
		})
		if err != nil {
			o.t.Fatalf("enqueue: %v", err)
		}
		for i, k := range keys[lo:] {
			tu := tuples[lo+i]
			o.rows[k] = opsRow{run: tu.AgentRunID, tool: tu.ToolName}
			o.runs[tu.AgentRunID] = append(o.runs[tu.AgentRunID], k)
		}
	}
	o.s.keys = append(o.s.keys, keys...)
	return keys
}

// action runs an operator command through the CLI binary, as chaos-operator.
func (o *opsScenario) action(args ...string) cliResult {
	o.t.Helper()
	began := time.Now()
	res := runCLI(o.t, nil, append(args, "--actor", opsActor, "--database-url", o.s.dbURL)...)
	if d := time.Since(began); d > 5*time.Second {
		o.logf("drainer %s took %.1fs", args[0], d.Seconds())
	}
	return res
}

// mustAction is action that must exit 0.
func (o *opsScenario) mustAction(args ...string) cliResult {
	o.t.Helper()
	res := o.action(args...)
	if res.code != 0 {
		o.t.Fatalf("drainer %s: %s", strings.Join(args, " "), res)
	}
	return res
}

// logf logs with the time since the replicas started.
func (o *opsScenario) logf(format string, args ...any) {
	o.t.Helper()
	o.t.Logf("[+%.1fs] "+format, append([]any{time.Since(o.start).Seconds()}, args...)...)
}

// waitUntil waits (generously) for cond while every replica keeps running.
func (o *opsScenario) waitUntil(what string, cond func() (bool, string)) {
	o.t.Helper()
	began := time.Now()
	testkit.WaitFor(o.t, chaosSettleBound(), what, func() (bool, string) {
		for _, r := range o.replicas {
			r.requireRunning()
		}
		return cond()
	})
	if d := time.Since(began); d > 10*time.Second {
		o.logf("waited %.1fs for %s", d.Seconds(), what)
	}
}

// describeOpen summarizes keys' open rows for a wait's failure: how many
// are in each state (status, attempts, last error, how far ahead they are
// due and their floor lies, in seconds).
func (o *opsScenario) describeOpen(keys []string) string {
	o.t.Helper()
	rows, err := o.s.pool.Query(context.Background(), `SELECT format('%s×%s attempts=%s due=%ss floor=%ss error=%s',
	        count(*), status, attempts,
	        round(extract(epoch FROM next_attempt_at - now())),
	        coalesce(round(extract(epoch FROM not_before - now()))::text, '-'),
	        coalesce(left(last_error, 40), '-'))
	      FROM drainer.outbox WHERE key = ANY($1) AND status IN ('pending', 'in_flight')
	     GROUP BY status, attempts, round(extract(epoch FROM next_attempt_at - now())),
	              round(extract(epoch FROM not_before - now())), left(last_error, 40)
	     ORDER BY count(*) DESC LIMIT 12`, keys)
	if err != nil {
		return err.Error()
	}
	groups, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err.Error()
	}
	if len(groups) == 0 {
		return "none"
	}
	return strings.Join(groups, "; ")
}

func (o *opsScenario) count(sql string, args ...any) int {
	o.t.Helper()
	var n int
	if err := o.s.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		o.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// floors counts the pending rows of tools whose not_before floor (a
// provider's Retry-After, or the backoff) lies more than ahead in the future.
func (o *opsScenario) floors(ahead time.Duration, tools ...string) int {
	o.t.Helper()
	return o.count(`SELECT count(*) FROM drainer.outbox WHERE status = 'pending' AND tool_name = ANY($1)
	    AND not_before > now() + $2 * interval '1 millisecond'`, tools, ahead.Milliseconds())
}

// succeeded counts the succeeded rows, and whether none is pending or in_flight.
func (o *opsScenario) progress() (succeeded int, idle bool, desc string) {
	c := statusCounts(o.t, o.s.pool)
	return c["succeeded"], c["pending"] == 0 && c["in_flight"] == 0, fmt.Sprint(c)
}

// waitProgress waits until a row more than before succeeded (or nothing is
// left to drain), so the next action meets a drain under way.
func (o *opsScenario) waitProgress(what string, before int) {
	o.t.Helper()
	o.waitUntil(what, func() (bool, string) {
		n, idle, desc := o.progress()
		return n > before || idle, desc
	})
}

// deferredFar is how far ahead a row of the scenario is due only when a
// pause deferred it (pausedRecheck, a minute and up to half as much again):
// its backoff (cap 500 ms), Retry-After floors (at most 10 s) and breakers
// (30 s) never push a row this far.
const deferredFar = 45 * time.Second

// waitWoken waits until no pending row of tools is deferred by a pause
// (due more than deferredFar ahead): a resume wakes them within the pause
// watcher's interval, on every replica. A pause that follows at once then
// holds rows that come due, as the next step needs; a resume that no
// replica saw (resumed and paused again between two of their reads)
// would leave them deferred for a minute.
func (o *opsScenario) waitWoken(what string, tools ...string) {
	o.t.Helper()
	o.waitUntil(what, func() (bool, string) {
		n := o.count(`SELECT count(*) FROM drainer.outbox WHERE tool_name = ANY($1) AND status = 'pending'
		    AND next_attempt_at > now() + $2 * interval '1 millisecond'`, tools, deferredFar.Milliseconds())
		return n == 0, fmt.Sprintf("%d rows deferred", n)
	})
}

// opsChange and opsResult are the parts of the JSON of requeue and cancel
// the scenario reads.
type opsChange struct {
	Key          string     `json:"key"`
	FromStatus   string     `json:"from_status"`
	Status       string     `json:"status"`
	FromAttempts int        `json:"from_attempts"`
	Attempts     int        `json:"attempts"`
	NotBefore    *time.Time `json:"not_before"`
	Warning      string     `json:"warning"`
}

type opsResult struct {
	Action       string      `json:"action"`
	Count        int         `json:"count"`
	Rows         []opsChange `json:"rows"`
	RefusedCount int         `json:"refused_count"`
	Refused      []struct {
		Key, Status, Why string
	} `json:"refused"`
	Revived []struct {
		AgentRunID string   `json:"agent_run_id"`
		Restored   []string `json:"restored"`
	} `json:"revived_runs"`
}

func (o *opsScenario) parseResult(res cliResult) opsResult {
	o.t.Helper()
	var r opsResult
	if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
		o.t.Fatalf("output of the operator command is not its JSON result: %v\n%s", err, res)
	}
	return r
}

// pendingCandidates lists pending forward rows of tools among keys (all
// when keys is nil) that the provider never applied, that no operator
// action touched, in seq order, as never-attempted and attempted ones.
func (o *opsScenario) pendingCandidates(tools []string, keys []string) (fresh, attempted []string) {
	o.t.Helper()
	rows, err := o.s.pool.Query(context.Background(), `SELECT key, attempts FROM drainer.outbox
	     WHERE status = 'pending' AND kind = 'forward' AND tool_name = ANY($1)
	       AND ($2::text[] IS NULL OR key = ANY($2)) ORDER BY seq`, tools, keys)
	if err != nil {
		o.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var attempts int
		if err := rows.Scan(&k, &attempts); err != nil {
			o.t.Fatal(err)
		}
		if _, done := o.cancelled[k]; done || o.aborted[o.rows[k].run] || o.s.provider.Effects(k) != 0 {
			continue
		}
		if attempts == 0 {
			fresh = append(fresh, k)
		} else {
			attempted = append(attempted, k)
		}
	}
	if err := rows.Err(); err != nil {
		o.t.Fatal(err)
	}
	return fresh, attempted
}

// pick returns up to n of keys, chosen with the scenario's random source.
func (o *opsScenario) pick(keys []string, n int) []string {
	keys = slices.Clone(keys)
	o.s.rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return keys[:min(n, len(keys))]
}

// cancel runs `drainer cancel KEY` on each of keys. A row the daemon moved
// meanwhile is refused (exit 1 naming it); any other failure is fatal.
func (o *opsScenario) cancel(keys []string) (done int) {
	o.t.Helper()
	for _, k := range keys {
		res := o.action("cancel", k, "--reason", "chaos: the customer withdrew", "--output", "json")
		switch {
		case res.code == 0:
			r := o.parseResult(res)
			if len(r.Rows) != 1 || r.Rows[0].Key != k || r.Rows[0].Status != "cancelled" {
				o.t.Fatalf("drainer cancel %s: %s\nwant the row cancelled", k, res)
			}
			o.cancelled[k] = r.Rows[0].Attempts
			done++
		case res.code == 1 && strings.Contains(res.stderr, "cannot cancel "+k):
			o.t.Logf("cancel %s refused: %s", k, strings.TrimSpace(res.stderr))
		default:
			o.t.Fatalf("drainer cancel %s: %s", k, res)
		}
	}
	return done
}

// abort runs `drainer abort RUN` on each of runs and returns how many
// never-attempted rows they cancelled.
func (o *opsScenario) abort(runs []string) (cancelled int) {
	o.t.Helper()
	for _, run := range runs {
		res := o.mustAction("abort", run, "--reason", "chaos: the agent saw a wrong result", "--output", "json")
		var a struct {
			AgentRunID     string `json:"agent_run_id"`
			Cancelled      int    `json:"cancelled"`
			AlreadyAborted bool   `json:"already_aborted"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &a); err != nil || a.AgentRunID != run || a.AlreadyAborted {
			o.t.Fatalf("drainer abort %s: %s\nwant a first abort of the run (%v)", run, res, err)
		}
		o.aborted[run] = true
		cancelled += a.Cancelled
	}
	return cancelled
}

// abortableRuns lists the runs named prefix-… no operator action touched,
// those with a succeeded row (their saga has something to undo) first.
func (o *opsScenario) abortableRuns(prefix string) []string {
	o.t.Helper()
	rows, err := o.s.pool.Query(context.Background(), `SELECT agent_run_id FROM drainer.outbox
	     WHERE kind = 'forward' AND agent_run_id LIKE $1 || '-%'
	     GROUP BY agent_run_id ORDER BY bool_or(status = 'succeeded') DESC, bool_or(status = 'pending') DESC, agent_run_id`, prefix)
	if err != nil {
		o.t.Fatal(err)
	}
	runs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		o.t.Fatal(err)
	}
	return slices.DeleteFunc(runs, func(run string) bool {
		if o.aborted[run] {
			return true
		}
		for _, k := range o.runs[run] {
			if _, ok := o.cancelled[k]; ok {
				return true
			}
		}
		return false
	})
}

// reload writes cfg and SIGHUPs every replica, and waits until each has
// loaded it.
func (o *opsScenario) reload(cfg, what string) {
	o.t.Helper()
	loaded := make([]int, len(o.replicas))
	refused := make([]int, len(o.replicas))
	for i, r := range o.replicas {
		out := r.stderr.String()
		loaded[i], refused[i] = strings.Count(out, "config reloaded"), strings.Count(out, "config reload refused")
	}
	if err := os.WriteFile(o.s.cfgPath, []byte(cfg), 0o644); err != nil {
		o.t.Fatal(err)
	}
	for _, r := range o.replicas {
		r.signal(syscall.SIGHUP)
	}
	o.waitUntil("every replica to reload the config that "+what, func() (bool, string) {
		var pending []string
		for i, r := range o.replicas {
			out := r.stderr.String()
			if strings.Count(out, "config reload refused") > refused[i] {
				o.t.Fatalf("%s refused the config that %s:\n%s", r.name, what, tail(out, 3000))
			}
			if strings.Count(out, "config reloaded") <= loaded[i] {
				pending = append(pending, r.name)
			}
		}
		return len(pending) == 0, fmt.Sprintf("not reloaded yet: %v", pending)
	})
}

// claimedSinceNow waits until every replica finished a claim that started
// after this call: no claim begun under an older config is left.
func (o *opsScenario) claimedSinceNow() {
	o.t.Helper()
	// claims reads a replica's claim count; a scrape that fails (a loaded
	// machine) is read again.
	claims := func(r *daemon) (float64, bool) {
		code, body := r.get("/metrics")
		return sumMetric(body, "drainer_claim_batch_size_count"), code == http.StatusOK
	}
	base := make([]float64, len(o.replicas))
	o.waitUntil("every replica's claim count", func() (bool, string) {
		for i, r := range o.replicas {
			n, ok := claims(r)
			if !ok {
				return false, r.name + " /metrics unreachable"
			}
			base[i] = n
		}
		return true, ""
	})
	o.waitUntil("every replica to claim again", func() (bool, string) {
		var behind []string
		for i, r := range o.replicas {
			// Two claims more: the first may have started before.
			if n, ok := claims(r); !ok || n < base[i]+2 {
				behind = append(behind, r.name)
			}
		}
		return len(behind) == 0, fmt.Sprintf("no new claim yet: %v", behind)
	})
}

// chaosOperatorActions: three replicas drain rows whose provider answers
// 30 % of requests 429 with a Retry-After of 4 s, while an operator, through
// the CLI, pauses and resumes an adapter and a route, removes a route by
// SIGHUP and restores it (twice: at once, and after rows piled up
// unrouted), cancels rows, aborts runs, and requeues pending rows and
// failed ones, all without --ignore-retry-after. Besides chaosCheck (no
// Retry-After violated, no duplicate, nothing lost or stuck, audit intact):
// cancelled rows had no effect and no attempt after the cancel; a row of an
// aborted run that never went out is cancelled, one that went out finished
// and its effect was compensated once, in reverse order; rows of the
// removed route got no request while it was gone and then each succeeded
// once; no attempt was given back for a request that reached the provider.
func chaosOperatorActions(t *testing.T, seed uint64) {
	f := chaosRows(1, 10)
	t.Logf("chaos seed %d (rows about %d, full %v)", seed, 400*f, chaosFull())
	dbURL, pool := newMigratedDB(t)
	provider := mockprovider.New(mockprovider.Config{
		Seed:              int64(seed),
		Fail503:           0.05,
		Fail429:           0.30,
		RetryAfterSeconds: opsRetryAfter,
		VerifyTuple:       true,
	})
	baseURL, err := provider.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(provider.Close)
	tap, tapURL := newOpsTap(t, baseURL)

	dir := t.TempDir()
	o := &opsScenario{
		t: t, tap: tap, f: f,
		cfgFull:        opsConfig(tapURL, true),
		cfgNoRcp:       opsConfig(tapURL, false),
		rows:           map[string]opsRow{},
		runs:           map[string][]string{},
		cancelled:      map[string]int{},
		aborted:        map[string]bool{},
		requeuedFailed: map[string]bool{},
	}
	cfgPath := writeFile(t, dir, "drainer.yaml", o.cfgFull)
	for _, cfg := range []string{o.cfgFull, o.cfgNoRcp} {
		p := writeFile(t, dir, "check.yaml", cfg)
		if res := runCLI(t, nil, "check", "--config", p); res.code != 0 {
			t.Fatalf("drainer check:\n%s\n%s", cfg, res)
		}
	}
	o.s = &chaosSetup{dbURL: dbURL, pool: pool, provider: provider, cfgPath: cfgPath,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}

	o.enqueue(opsOrders("ord0", 40*f, 3, 1))
	o.enqueue(opsSeats("seat0", 40*f))
	for i := range 3 {
		o.replicas = append(o.replicas, o.s.start(t, fmt.Sprintf("replica-%d", i)))
	}
	start := time.Now()
	o.start = start

	o.waitUntil("the drain under way with Retry-After floors in force", func() (bool, string) {
		n, idle, desc := o.progress()
		floors := o.floors(0, opsCharge, opsReceipt, opsSeat)
		return n >= len(o.s.keys)/10 && (floors > 0 || idle), fmt.Sprintf("%s, %d floors", desc, floors)
	})

	o.pauseAdapter()
	o.pauseRoute()
	o.flipRoute()
	o.removeAndRestoreRoute()
	o.requeueFailed()

	// Settled: nothing pending or in flight, and no saga with a step to take.
	o.waitUntil("every row terminal and every saga done", func() (bool, string) {
		c := statusCounts(t, pool)
		sagas := o.count(`SELECT count(*) FROM drainer.runs WHERE saga_state IN ('waiting', 'compensating')`)
		return c["pending"] == 0 && c["in_flight"] == 0 && sagas == 0, fmt.Sprintf("%v, %d active sagas", c, sagas)
	})
	elapsed := time.Since(start)
	o.logf("settled")

	for _, r := range o.replicas {
		r.signal(syscall.SIGTERM)
	}
	for _, r := range o.replicas {
		if code := r.exitCode(60 * time.Second); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0", r.name, code)
		}
	}

	comp, err := pool.Query(context.Background(), `SELECT key FROM drainer.outbox WHERE kind = 'compensation' ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	compKeys, err := pgx.CollectRows(comp, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	o.verify(compKeys)
	o.explainViolations()
	o.s.keys = append(o.s.keys, compKeys...)
	chaosResults.add(chaosCheck(t, "operator_actions", o.s, elapsed))
}

// pauseAdapter: `drainer pause --adapter payments` while its rows drain;
// rows enqueued meanwhile wait. Under the pause, some of its rows are
// cancelled and some runs aborted (their compensations queue behind the
// pause); then `drainer resume --adapter payments`. Then a short pause and
// resume, while Retry-After floors are running.
func (o *opsScenario) pauseAdapter() {
	t := o.t
	o.mustAction("pause", "--adapter", "payments", "--reason", "chaos: payments maintenance")
	wave := o.enqueue(opsOrders("ord1", 20*o.f, 2, 0))
	o.waitUntil("a payments row held by the pause", func() (bool, string) {
		n := o.count(`SELECT count(*) FROM drainer.outbox WHERE tool_name = ANY($1)
		    AND status = 'pending' AND last_error LIKE 'paused by an operator%'`, []string{opsCharge, opsRefund})
		return n > 0, fmt.Sprintf("%d rows held", n)
	})
	fresh, attempted := o.pendingCandidates([]string{opsCharge}, nil)
	cancelled := o.cancel(append(o.pick(fresh, 2*o.f), o.pick(attempted, 2*o.f)...))
	// Runs of the first wave with a succeeded charge (their saga has work),
	// and runs enqueued under the pause.
	first := o.abortableRuns("ord0")
	runs := append(o.pick(first[:min(6*o.f, len(first))], 3*o.f), o.pick(o.abortableRuns("ord1"), 3*o.f)...)
	aborted := o.abort(runs)
	floors := o.floors(0, opsCharge, opsRefund)
	before, _, _ := o.progress()
	o.mustAction("resume", "--adapter", "payments", "--reason", "chaos: maintenance over")
	o.logf("adapter pause: %d rows enqueued under it; cancelled %d rows (%d never attempted and %d attempted offered); aborted %d runs (%d rows cancelled); resumed with %d Retry-After floors in force",
		len(wave), cancelled, min(len(fresh), 2*o.f), min(len(attempted), 2*o.f), len(runs), aborted, floors)
	o.waitProgress("the drain to go on after the adapter resume", before)
	o.waitWoken("the payments rows the pause deferred, woken by the resume", opsCharge, opsRefund)

	// A short pause, resumed as soon as it holds a row: rows answered 429
	// just before are still behind their Retry-After when the resume wakes
	// them.
	var since time.Time
	if err := o.s.pool.QueryRow(context.Background(), `SELECT now()`).Scan(&since); err != nil {
		t.Fatal(err)
	}
	o.mustAction("pause", "--adapter", "payments", "--reason", "chaos: short maintenance")
	o.waitUntil("a payments row held by the short pause", func() (bool, string) {
		held := o.count(`SELECT count(*) FROM drainer.outbox WHERE tool_name = ANY($1) AND status = 'pending'
		    AND last_error LIKE 'paused by an operator%' AND updated_at > $2`, []string{opsCharge, opsRefund}, since)
		open := o.count(`SELECT count(*) FROM drainer.outbox WHERE tool_name = ANY($1) AND status IN ('pending', 'in_flight')`,
			[]string{opsCharge, opsRefund})
		return held > 0 || open == 0, fmt.Sprintf("%d rows held, %d open", held, open)
	})
	floors = o.floors(0, opsCharge, opsRefund)
	before, _, _ = o.progress()
	o.mustAction("resume", "--adapter", "payments", "--reason", "chaos: short maintenance over")
	o.logf("short adapter pause: resumed with %d Retry-After floors in force", floors)
	o.waitProgress("the drain to go on after the second adapter resume", before)
	o.waitWoken("the payments rows the short pause deferred, woken by its resume", opsCharge, opsRefund)
}

// pauseRoute: `drainer pause charge_card` while its rows are behind
// Retry-After floors; `drainer requeue KEY` of such rows (they stay behind
// their floor); rows enqueued under the pause wait; `drainer requeue
// --status pending --tool charge_card`; `drainer resume charge_card`. No
// requeue with --ignore-retry-after.
func (o *opsScenario) pauseRoute() {
	t := o.t
	wave := o.enqueue(opsOrders("ord3", 15*o.f, 2, 0))
	o.waitUntil("charge_card rows behind a Retry-After floor", func() (bool, string) {
		floors := o.floors(2*time.Second, opsCharge)
		open := o.count(`SELECT count(*) FROM drainer.outbox WHERE key = ANY($1) AND status IN ('pending', 'in_flight')`, wave)
		return floors > 0 || open == 0, fmt.Sprintf("%d floors, %d rows open", floors, open)
	})
	o.mustAction("pause", opsCharge, "--reason", "chaos: card network incident")

	// Requeue single rows behind a floor, the longest first: they stay behind it.
	rows, err := o.s.pool.Query(context.Background(), `SELECT key FROM drainer.outbox
	     WHERE status = 'pending' AND kind = 'forward' AND tool_name = $1 AND not_before > now()
	     ORDER BY not_before DESC`, opsCharge)
	if err != nil {
		t.Fatal(err)
	}
	floored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	named := 0
	floored = slices.DeleteFunc(floored, func(k string) bool { _, c := o.cancelled[k]; return c })
	floored = floored[:min(len(floored), 3*o.f)]
	for _, k := range floored {
		res := o.action("requeue", k, "--reason", "chaos: retry it", "--output", "json")
		switch {
		case res.code == 0:
			r := o.parseResult(res)
			if len(r.Rows) != 1 || r.Rows[0].Status != "pending" || r.Rows[0].Attempts != r.Rows[0].FromAttempts {
				t.Fatalf("drainer requeue %s: %s\nwant the pending row requeued with its attempts", k, res)
			}
			if r.Rows[0].NotBefore != nil {
				named++
			}
		case res.code == 1 && strings.Contains(res.stderr, "cannot requeue "+k):
			t.Logf("requeue %s refused: %s", k, strings.TrimSpace(res.stderr))
		default:
			t.Fatalf("drainer requeue %s: %s", k, res)
		}
	}

	// Replicas read the pauses within seconds (every 2 s): rows enqueued
	// before a replica has read this one may go out. While none is held
	// and none of the rows enqueued so far is still open without an
	// attempt, enqueue more under the pause, so that the step does not
	// hang on how fast the rows were claimed. (A row that went out and was
	// answered 429 waits for its Retry-After floor, which may be longer
	// than this wait: it is not held by the pause.) A held row is one a
	// replica released with the pause as its last error (without an
	// attempt), or one deferred in bulk with it (no attempt, due a minute
	// later), which carries no error of its own.
	held := o.enqueue(opsOrders("ord4", 10*o.f, 2, 0))
	waves := 1
	o.waitUntil("a charge_card row enqueued under the route pause to be held", func() (bool, string) {
		n := o.count(`SELECT count(*) FROM drainer.outbox WHERE key = ANY($1)
		    AND status = 'pending' AND (last_error LIKE 'paused by an operator%'
		         OR (attempts = 0 AND next_attempt_at > now() + interval '10 seconds'))`, held)
		if n == 0 && o.count(`SELECT count(*) FROM drainer.outbox WHERE key = ANY($1) AND status IN ('pending', 'in_flight')
		    AND attempts = 0`, held) == 0 {
			held = append(held, o.enqueue(opsOrders(fmt.Sprintf("ord4w%d", waves), 10*o.f, 2, 0))...)
			waves++
		}
		return n > 0, fmt.Sprintf("%d rows held (%d waves enqueued); open: %s", n, waves, o.describeOpen(held))
	})
	o.logf("route pause: rows enqueued under it, open: %s", o.describeOpen(held))
	// Requeue every pending charge_card row.
	res := o.action("requeue", "--status", "pending", "--tool", opsCharge, "--reason", "chaos: retry them all",
		"--show", "0", "--output", "json")
	if res.code != 0 && res.code != 1 {
		t.Fatalf("drainer requeue --status pending: %s", res)
	}
	bulk := o.parseResult(res)
	if res.code == 1 && bulk.RefusedCount == 0 {
		t.Fatalf("drainer requeue --status pending failed without refusing a row: %s", res)
	}
	floors := o.floors(0, opsCharge)
	before, _, _ := o.progress()
	o.mustAction("resume", opsCharge, "--reason", "chaos: incident over")
	o.logf("route pause: requeued %d single rows behind a floor (%d reported due later); %d rows enqueued under it; bulk requeue of %d pending rows (%d refused); resumed with %d floors in force",
		len(floored), named, len(held), bulk.Count, bulk.RefusedCount, floors)
	o.waitProgress("the drain to go on after the route resume", before)
}

// flipRoute removes the send_receipt route by SIGHUP while its rows are
// behind Retry-After floors, and restores it at once.
func (o *opsScenario) flipRoute() {
	wave := o.enqueue(opsOrders("rcpt", 15*o.f, 0, 2))
	o.waitUntil("send_receipt rows behind a Retry-After floor", func() (bool, string) {
		floors := o.floors(2*time.Second, opsReceipt)
		open := o.count(`SELECT count(*) FROM drainer.outbox WHERE key = ANY($1) AND status IN ('pending', 'in_flight')`, wave)
		return floors > 0 || open == 0, fmt.Sprintf("%d floors, %d rows open", floors, open)
	})
	o.reload(o.cfgNoRcp, "removes the send_receipt route")
	floors := o.floors(0, opsReceipt)
	o.reload(o.cfgFull, "restores the send_receipt route")
	o.logf("route flip: %d send_receipt rows enqueued; restored with %d floors in force", len(wave), floors)
}

// removeAndRestoreRoute removes the send_receipt route by SIGHUP; rows
// enqueued then wait unrouted (no request, no attempt) while some are
// cancelled and some of their runs aborted; the route is then restored.
func (o *opsScenario) removeAndRestoreRoute() {
	t := o.t
	o.reload(o.cfgNoRcp, "removes the send_receipt route")
	o.claimedSinceNow()
	wave := o.enqueue(opsOrders("late", 20*o.f, 1, 2))
	var receipts []string
	for _, k := range wave {
		if o.rows[k].tool == opsReceipt {
			receipts = append(receipts, k)
		}
	}
	o.waitUntil("a send_receipt row looked at without a route", func() (bool, string) {
		n := o.count(`SELECT count(*) FROM drainer.outbox WHERE key = ANY($1)
		    AND last_error LIKE 'no route for tool_name%'`, receipts)
		return n > 0, fmt.Sprintf("%d rows looked at", n)
	})
	fresh, _ := o.pendingCandidates([]string{opsReceipt}, receipts)
	cancelled := o.cancel(o.pick(fresh, 3*o.f))
	runs := o.pick(o.abortableRuns("late"), 3*o.f)
	aborted := o.abort(runs)

	// While the route was gone no request went out and no attempt was consumed.
	rows, err := o.s.pool.Query(context.Background(), `SELECT key, status, attempts FROM drainer.outbox WHERE key = ANY($1)`, receipts)
	if err != nil {
		t.Fatal(err)
	}
	waiting := 0
	for rows.Next() {
		var k, status string
		var attempts int
		if err := rows.Scan(&k, &status, &attempts); err != nil {
			t.Fatal(err)
		}
		if n := o.tap.requestsFor(k); n != 0 {
			t.Errorf("send_receipt row %s: %d requests reached the provider while its route was removed", k, n)
		}
		switch {
		case status == "pending" && attempts != 0:
			t.Errorf("send_receipt row %s: %d attempts consumed while its route was removed", k, attempts)
		case status == "pending":
			waiting++
		case status != "in_flight" && status != "cancelled":
			t.Errorf("send_receipt row %s is %s while its route was removed", k, status)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	o.reload(o.cfgFull, "restores the send_receipt route")
	o.logf("route removed: %d send_receipt rows enqueued, %d waiting unrouted at the restore; cancelled %d; aborted %d runs (%d rows cancelled)",
		len(receipts), waiting, cancelled, len(runs), aborted)
}

// requeueFailed: `drainer requeue --status failed --tool reserve_seat`
// (without --ignore-retry-after) as soon as a row failed on a 429 whose
// Retry-After is still running.
func (o *opsScenario) requeueFailed() {
	t := o.t
	wave := o.enqueue(opsSeats("seat5", 30*o.f))
	o.waitUntil("a reserve_seat row failed under a running Retry-After", func() (bool, string) {
		rows, err := o.s.pool.Query(context.Background(), `SELECT key FROM drainer.outbox WHERE tool_name = $1 AND status = 'failed'`, opsSeat)
		if err != nil {
			t.Fatal(err)
		}
		failed, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now().Add(time.Second)
		for _, k := range failed {
			if o.tap.underRetryAfter(k, now) {
				return true, ""
			}
		}
		open := o.count(`SELECT count(*) FROM drainer.outbox WHERE key = ANY($1) AND status IN ('pending', 'in_flight')`, wave)
		return open == 0, fmt.Sprintf("%d failed reserve_seat rows, none under a Retry-After; %d rows of the wave open", len(failed), open)
	})
	at := time.Now()
	res := o.mustAction("requeue", "--status", "failed", "--tool", opsSeat, "--reason", "chaos: seats freed",
		"--show", "-1", "--output", "json")
	r := o.parseResult(res)
	under, named := []string{}, 0
	for _, ch := range r.Rows {
		if ch.FromStatus != "failed" || ch.Status != "pending" || ch.Attempts != 0 {
			t.Errorf("requeue of failed row %s: %s → %s with %d attempts, want failed → pending with 0", ch.Key, ch.FromStatus, ch.Status, ch.Attempts)
		}
		o.requeuedFailed[ch.Key] = true
		if o.tap.underRetryAfter(ch.Key, at) {
			under = append(under, ch.Key)
		}
		if ch.NotBefore != nil {
			named++
		}
	}
	o.logf("requeue --status failed at %s: %d rows requeued (%d revived runs), %d of them under a running Retry-After %v, %d reported due later",
		at.UTC().Format("15:04:05.000"), r.Count, len(r.Revived), len(under), under, named)
}

// verify checks what the operator actions promise, once everything settled.
func (o *opsScenario) verify(compKeys []string) {
	t := o.t
	type final struct {
		status, tool, run string
		attempts          int
		seq               int64
	}
	fin := map[string]final{}
	rows, err := o.s.pool.Query(context.Background(), `SELECT key, status, tool_name, agent_run_id, attempts, seq FROM drainer.outbox`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var r final
		if err := rows.Scan(&k, &r.status, &r.tool, &r.run, &r.attempts, &r.seq); err != nil {
			t.Fatal(err)
		}
		fin[k] = r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	effects := o.s.provider.Effects

	// Cancelled rows: no effect, and no attempt after the cancel.
	for k, at := range o.cancelled {
		if r := fin[k]; r.status != "cancelled" || r.attempts != at || effects(k) != 0 {
			t.Errorf("cancelled row %s: now %s with %d attempts (%d when cancelled) and %d effects; want cancelled, no attempt since, no effect",
				k, r.status, r.attempts, at, effects(k))
		}
	}

	// Aborted runs: what never went out is cancelled; what went out
	// finished, and a charge that happened was refunded once, the saga
	// going in reverse seq order.
	comps := o.s.provider.Compensations()
	for run := range o.aborted {
		var compensated []string
		for _, k := range o.runs[run] {
			r, req, eff := fin[k], o.tap.requestsFor(k), effects(k)
			_, byOperator := o.cancelled[k]
			switch {
			case req == 0 && r.status != "cancelled":
				t.Errorf("run %s aborted: row %s never went out but is %s, want cancelled", run, k, r.status)
			case req > 0 && r.status == "cancelled" && !byOperator:
				t.Errorf("run %s aborted: row %s had gone out (%d requests) but the abort cancelled it", run, k, req)
			case eff > 0 && r.tool == opsCharge && r.status != "compensated":
				t.Errorf("run %s aborted: charge %s took effect but is %s, want compensated", run, k, r.status)
			case eff > 0 && r.tool == opsReceipt && r.status != "succeeded":
				t.Errorf("run %s aborted: receipt %s took effect but is %s, want succeeded", run, k, r.status)
			case eff == 0 && req > 0 && !byOperator:
				t.Errorf("run %s aborted: row %s went out but ended %s without an effect", run, k, r.status)
			}
			if r.status == "compensated" {
				compensated = append(compensated, k)
			}
		}
		slices.SortFunc(compensated, func(a, b string) int { return int(fin[b].seq - fin[a].seq) })
		if got := comps[run]; !slices.Equal(got, compensated) {
			t.Errorf("run %s aborted: compensations applied for %v, want %v (each once, reverse seq order)", run, got, compensated)
		}
	}
	for run, got := range comps {
		if !o.aborted[run] {
			t.Errorf("run %s was not aborted by the operator, yet compensations were applied for %v", run, got)
		}
	}

	// Every other row: succeeded once (reserve_seat may also have failed,
	// without an effect).
	byStatus := map[string]map[string]int{}
	for k, row := range o.rows {
		r := fin[k]
		if byStatus[row.tool] == nil {
			byStatus[row.tool] = map[string]int{}
		}
		byStatus[row.tool][r.status]++
		if _, ok := o.cancelled[k]; ok || o.aborted[row.run] {
			continue
		}
		switch {
		case r.status == "succeeded" && effects(k) == 1:
		case row.tool == opsSeat && r.status == "failed" && effects(k) == 0:
		default:
			t.Errorf("%s row %s of run %s: %s with %d effects, want succeeded once", row.tool, k, row.run, r.status, effects(k))
		}
	}

	// No attempt was given back for a request that reached the provider.
	for _, k := range append(slices.Collect(maps.Keys(o.rows)), compKeys...) {
		if o.requeuedFailed[k] {
			continue // requeue gave it a fresh budget
		}
		if req := o.tap.requestsFor(k); req > fin[k].attempts {
			t.Errorf("row %s (%s): %d requests reached the provider but %d attempts were counted", k, fin[k].status, req, fin[k].attempts)
		}
	}

	// The audit trail holds every operator action, by its actor.
	for _, a := range []struct {
		key, event string
		want       int
	}{
		{"adapter:payments", "operator:pause", 2}, {"adapter:payments", "operator:resume", 2},
		{"route:" + opsCharge, "operator:pause", 1}, {"route:" + opsCharge, "operator:resume", 1},
	} {
		if n := o.count(`SELECT count(*) FROM drainer.audit WHERE key = $1 AND event = $2 AND actor = $3`, a.key, a.event, opsActor); n != a.want {
			t.Errorf("audit: %d %s entries on %s by %s, want %d", n, a.event, a.key, opsActor, a.want)
		}
	}
	for run := range o.aborted {
		if n := o.count(`SELECT count(*) FROM drainer.audit WHERE key = $1 AND event = 'operator:abort' AND actor = $2`, "run:"+run, opsActor); n != 1 {
			t.Errorf("audit: %d operator:abort entries on run:%s, want 1", n, run)
		}
	}
	for k := range o.cancelled {
		if n := o.count(`SELECT count(*) FROM drainer.audit WHERE key = $1 AND to_status = 'cancelled' AND actor = $2`, k, opsActor); n != 1 {
			t.Errorf("audit: %d entries of %s cancelling %s, want 1", n, opsActor, k)
		}
	}
	t.Logf("operator_actions: %d rows cancelled by the operator, %d runs aborted, %d failed rows requeued, %d compensations; final statuses by tool %v",
		len(o.cancelled), len(o.aborted), len(o.requeuedFailed), len(compKeys), byStatus)
}

// explainViolations logs, for each key the provider saw too early, its row,
// its audit trail and when the provider last answered it 429: the evidence
// needed to find which writer lost the floor.
func (o *opsScenario) explainViolations() {
	t := o.t
	ctx := context.Background()
	seen := map[string]bool{}
	for _, k := range o.s.provider.RetryAfterViolations() {
		if seen[k] || len(seen) >= 5 {
			continue
		}
		seen[k] = true
		var b strings.Builder
		var status, tool string
		var attempts int
		var notBefore, next, updated *time.Time
		var lastErr *string
		err := o.s.pool.QueryRow(ctx, `SELECT status, tool_name, attempts, not_before, next_attempt_at, updated_at, last_error
		      FROM drainer.outbox WHERE key = $1`, k).Scan(&status, &tool, &attempts, &notBefore, &next, &updated, &lastErr)
		if err != nil {
			t.Logf("Retry-After violation on %s: read row: %v", k, err)
			continue
		}
		o.tap.mu.Lock()
		last429, requests := o.tap.last429[k], o.tap.requests[k]
		o.tap.mu.Unlock()
		fmt.Fprintf(&b, "Retry-After violation on %s (%s, run %s): now %s, %d attempts, not_before %v, next_attempt_at %v, last_error %v; %d requests, last 429 (Retry-After %ds) at %s; requeued from failed: %v\n",
			k, tool, o.rows[k].run, status, attempts, fmtTS(notBefore), fmtTS(next), strOrNil(lastErr), requests,
			opsRetryAfter, last429.UTC().Format("15:04:05.000"), o.requeuedFailed[k])
		rows, err := o.s.pool.Query(ctx, `SELECT at, event, coalesce(from_status, ''), coalesce(to_status, ''), coalesce(attempts, -1), actor, coalesce(reason, '')
		      FROM drainer.audit WHERE key = $1 ORDER BY id`, k)
		if err != nil {
			t.Logf("%sread audit: %v", b.String(), err)
			continue
		}
		for rows.Next() {
			var at time.Time
			var event, from, to, actor, reason string
			var n int
			if err := rows.Scan(&at, &event, &from, &to, &n, &actor, &reason); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "  audit %s %-12s %-9s -> %-9s attempts %d by %s %s\n", at.UTC().Format("15:04:05.000"), event, from, to, n, actor, reason)
		}
		rows.Close()
		t.Log(b.String())
	}
}

func fmtTS(ts *time.Time) string {
	if ts == nil {
		return "null"
	}
	return ts.UTC().Format("15:04:05.000")
}
