//go:build integration

package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/tooling/pgtemp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"
)

// The model-checked random test: random sequences of producer transactions
// at every isolation level (held open across other steps), agents' aborts,
// operator commands, pruning, provider answers of every class, replica
// SIGKILL/SIGSTOP and Postgres restarts run against two real `drainer run`
// processes and a Postgres cluster of the test's own. A reference model
// (model_check_test.go) records what the producers committed and what the
// operators did; once the daemons settled after each sequence, the model's
// invariants are checked against the database and the provider. See
// docs/reliability.md, "The model-checked random test".

// modelCase is a fixed sequence every run checks: a seed, and the
// features of the alphabet left out when it was found (the same seed draws
// another sequence with another alphabet).
type modelCase struct {
	seed    uint64
	without string // comma-separated, as DRAINER_MODEL_WITHOUT
	// first: the case was found with the first alphabet, before the
	// actions that kill the daemons' connections and tamper with the
	// audit; it keeps that alphabet so that the seed draws its sequence.
	first bool
	// upTo: the case was found with the alphabet that ended with this
	// action; later actions are left out so that the seed draws its
	// sequence.
	upTo string
}

// modelCases are sequences (20 actions) that found bugs, each failing on
// the code before its fix (see docs/reliability.md, "The model-checked
// random test").
var modelCases = []modelCase{
	{seed: 2, first: true},                     // a payload equal as a JSON value refused with 23505
	{seed: 7, without: "variant", first: true}, // a SERIALIZABLE snapshot older than a prune re-created a pruned row (created=true)
	{seed: 2, without: "variant", first: true}, // enqueue into a run aborted after the snapshot was sent; a parked step did not hold the saga
	{seed: 8, without: "variant", first: true}, // a compensable succeeded row pruned before its run's abort: no refund
	// a row its provider refused retryably (53300) retried for ever with attempts = 0
	{seed: 4, without: "snapshot,fault,operator,tamper,gateway,prune,variant,abort,unrouted", upTo: "refusal"},
}

// modelFeatures are the parts of the alphabet DRAINER_MODEL_WITHOUT can
// leave out: variant (re-enqueues with a payload equal as a JSON value but
// not as text), snapshot (transactions held open across steps), prune
// (direct pruning passes, and the daemons' retention with short windows),
// fault (SIGKILL, SIGSTOP, Postgres restarts), operator (CLI commands),
// abort (agents' abort_run), saga (compensable steps: without it, charge
// steps become note steps), tamper (edits of the audit behind the daemons'
// back), gateway (agent calls through the replicas' MCP gateways,
// model_gateway_test.go), unrouted (rows whose tool no route takes) and
// refusal (a provider that refuses, model_refusal_test.go) and partition
// (a replica cut off Postgres, model_partition_test.go).
var modelFeatures = []string{"variant", "snapshot", "prune", "fault", "operator", "abort", "saga", "tamper", "gateway", "unrouted", "refusal", "partition"}

// Timing of the daemons under test (see modelConfig).
const (
	modelKeyTTL     = 70 * time.Second // the shortest the config allows: a 10s sending window
	modelSendWindow = modelKeyTTL - time.Minute
	modelTombstones = modelKeyTTL
	modelLease      = 7 * time.Second // adapter timeout 1s + 5s, plus a second
)

// TestChaosModel runs the model-checked random test: the fixed seeds and a
// few fresh ones (printed) in a bounded run; DRAINER_CHAOS=full runs many
// fresh seeds with longer sequences. DRAINER_MODEL_SEEDS=1,2,3 runs exactly
// those seeds (a seed reproduces the sequence of actions; the daemons'
// timing may differ between runs).
func TestChaosModel(t *testing.T) {
	cases := slices.Clone(modelCases)
	fresh, steps := 2, 20
	if chaosFull() {
		fresh, steps = 20, 40
	}
	base := uint64(time.Now().UnixNano())
	for i := range fresh {
		cases = append(cases, modelCase{seed: base + uint64(i)*7919})
	}
	if v := os.Getenv("DRAINER_MODEL_SEEDS"); v != "" {
		cases = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("DRAINER_MODEL_SEEDS: %v", err)
			}
			cases = append(cases, modelCase{seed: n})
		}
	}
	if v := os.Getenv("DRAINER_MODEL_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("DRAINER_MODEL_STEPS: %v", err)
		}
		steps = n
	}
	// -rapid.seed=N on the command line, as rapid's own failure message
	// suggests, runs that seed alone.
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "rapid.seed" {
			n, _ := strconv.ParseUint(f.Value.String(), 10, 64)
			cases = []modelCase{{seed: n}}
		}
	})
	// Shrinking reruns the sequence against the real daemons: bounded, so a
	// failure costs minutes, not an hour (RAPID_SHRINKTIME or
	// -rapid.shrinktime override it). Seeds, not rapid's fail files, are
	// what the test keeps (modelCases).
	flagDefault := func(name, env, v string) {
		set := os.Getenv(env) != ""
		flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
		if !set {
			if err := flag.Set(name, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	shrink := "20s"
	if chaosFull() {
		shrink = "3m"
	}
	flagDefault("rapid.shrinktime", "RAPID_SHRINKTIME", shrink)
	flagDefault("rapid.nofailfile", "RAPID_NOFAILFILE", "true")
	without, err := parseWithout(os.Getenv("DRAINER_MODEL_WITHOUT"))
	if err != nil {
		t.Fatalf("DRAINER_MODEL_WITHOUT: %v", err)
	}
	t.Logf("model cases %v, %d steps per sequence, without %v", cases, steps, without)
	env := newModelEnv(t, without)
	env.steps = steps
	env.without = without
	for _, c := range cases {
		name := "seed=" + strconv.FormatUint(c.seed, 10)
		if c.without != "" {
			name += "/without=" + c.without
		}
		ok := t.Run(name, func(t *testing.T) {
			caseWithout, err := parseWithout(c.without)
			if err != nil {
				t.Fatal(err)
			}
			env.without = maps.Clone(without)
			maps.Copy(env.without, caseWithout)
			env.first, env.upTo = c.first, c.upTo
			for name, v := range map[string]string{
				"rapid.seed": strconv.FormatUint(c.seed, 10), "rapid.checks": "1",
			} {
				if err := flag.Set(name, v); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			rapid.Check(t, env.sequence)
			t.Logf("seed %d: %v", c.seed, time.Since(start).Round(time.Millisecond))
		})
		if !ok {
			w := c.without
			if w == "" {
				w = os.Getenv("DRAINER_MODEL_WITHOUT")
			}
			t.Logf("seed %d failed: rerun it with DRAINER_MODEL_SEEDS=%d DRAINER_MODEL_WITHOUT=%s DRAINER_MODEL_STEPS=%d go test -count=1 -tags integration -run '^TestChaosModel$' -v ./integration/",
				c.seed, c.seed, w, steps)
			if !chaosFull() {
				break
			}
		}
	}
}

// parseWithout parses a comma-separated list of modelFeatures.
func parseWithout(list string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f != "" {
			if !slices.Contains(modelFeatures, f) {
				return nil, fmt.Errorf("unknown feature %q (known: %v)", f, modelFeatures)
			}
			out[f] = true
		}
	}
	return out, nil
}

// modelEnv is what every sequence of a run shares: the cluster, the
// provider, the daemons.
type modelEnv struct {
	t        *testing.T
	cluster  *pgtemp.Cluster
	dbURL    string
	pool     *pgxpool.Pool
	provider *scriptProvider
	cfgPath  string
	replicas []*modelReplica
	gen      int
	seq      int
	steps    int // actions per sequence
	// without names the features of the alphabet left out (to look past
	// a known bug while it is being fixed).
	without map[string]bool
	// first: the sequence draws from the first alphabet (modelCase.first);
	// upTo from the alphabet that ended with that action (modelCase.upTo).
	first bool
	upTo  string
	// tampered names the keys whose audit a sequence tampered with, and
	// how: audit verify must report each of them at the end of every later
	// sequence too (model_tamper_test.go).
	tampered map[string]string
	// zombies are spans after a SIGCONT during which a resumed replica
	// may still send a request it prepared before the SIGSTOP.
	zombies    []lossWindow
	floorsSeen int // provider floor violations already reported
	// gwServer is the MCP tool server behind the replicas' gateways;
	// gateways maps each replica (by name) to its gateway's URL.
	gwServer *gwServer
	gateways map[string]string
	// unrouted are the rows of earlier sequences whose tools have no
	// route: each sequence checks them all again.
	unrouted []*mUnrouted
	// healedAt is when the last partition was healed (actPartition).
	healedAt time.Time
	// ability records when some replica could reclaim rows and when none
	// could (every one SIGSTOPped or cut off Postgres): noteAbility.
	ability []ableChange
}

type modelReplica struct {
	d       *daemon
	stopped time.Time  // zero unless SIGSTOPped
	proxy   *holdProxy // its way to Postgres (actPartition)
}

func newModelEnv(t *testing.T, without map[string]bool) *modelEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgControlTimeout)
	defer cancel()
	cluster, err := pgtemp.Start(ctx, pgtemp.Options{})
	if err != nil {
		t.Fatalf("the model test needs a PostgreSQL server of its own, started from local binaries: %v", err)
	}
	t.Cleanup(func() {
		if err := cluster.Stop(); err != nil {
			t.Errorf("stop the model's cluster: %v", err)
		}
	})
	admin, err := pgx.Connect(ctx, cluster.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE drainer_model")
	admin.Close(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dbURL := cluster.URL("drainer_model")
	if res := runCLI(t, nil, "migrate", "--database-url", dbURL); res.code != 0 {
		t.Fatalf("drainer migrate: %s", res)
	}
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	// A producer or operator step that would wait for a lock held by a
	// transaction the model keeps open gives up instead of hanging the
	// sequence (the model treats it like any failed transaction).
	pcfg.ConnConfig.RuntimeParams["lock_timeout"] = "3000"
	pcfg.ConnConfig.RuntimeParams["statement_timeout"] = "30000"
	pcfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A sequence that failed leaves its open transactions open, each
		// holding a connection: the close does not wait for them (it
		// waited for ever, and a failure cost the whole test timeout).
		if !store.ClosePool(pool, 10*time.Second) {
			t.Log("the model's pool closed with connections still held by a failed sequence's open transactions")
		}
	})

	provider := newScriptProvider(modelDedupeTools...)
	srv := httptest.NewServer(provider)
	t.Cleanup(srv.Close)
	gw := newGWServer(t)
	if _, err := pool.Exec(ctx, modelRecvDDL()); err != nil {
		t.Fatalf("the refusing provider's table: %v", err)
	}
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", modelConfig(srv.URL, gw.url, dbURL, !without["prune"]))
	if res := runCLI(t, nil, "check", "--config", cfgPath); res.code != 0 {
		t.Fatalf("drainer check: %s", res)
	}
	e := &modelEnv{t: t, cluster: cluster, dbURL: dbURL, pool: pool, provider: provider, cfgPath: cfgPath, tampered: map[string]string{},
		gwServer: gw, gateways: map[string]string{}}
	pgHost, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r := &modelReplica{proxy: newHoldProxy(t, pgHost.Host)}
		r.d = e.startReplica(r.proxy)
		e.replicas = append(e.replicas, r)
	}
	for _, r := range e.replicas {
		r.d.waitReady(time.Minute)
	}
	return e
}

// Tools of the model's config: charge is compensated by refund; note is a
// key_idempotent step without compensation; sms is non_idempotent;
// gw_charge (gwTool) is the MCP tool agents call through the gateways;
// ledger is ordered per business_scope (checkOrderedScope); quota goes to
// an adapter that allows one call at a time (checkCapWake); flaky goes to
// an adapter whose breaker opens at the first failure (checkHeldWake).
const (
	toolCharge = "charge"
	toolRefund = "refund"
	toolNote   = "note"
	toolSMS    = "sms"
	toolLedger = "ledger"
	toolQuota  = "quota"
	toolFlaky  = "flaky"
)

var modelDedupeTools = []string{toolCharge, toolRefund, toolNote}

// modelConfig is the daemons' config. With prune, retention runs every
// second with windows of a second or two; without, it keeps the defaults
// (nothing is pruned during a run).
func modelConfig(baseURL, mcpURL, dbURL string, prune bool) string {
	retention := "  interval: 1s\n  batch_size: 100\n  succeeded: 1s\n  cancelled: 1s\n  failed: 20s\n  compensated: 1s\n  audit: 1h\n"
	if !prune {
		retention = ""
	}
	recvAdapter, recvRoutes := modelRecvConfig(dbURL)
	return fmt.Sprintf(`workers: 4
max_in_flight_bytes: 64KiB
lease: %s
unrouted_recheck: 1s
retention:
%s  tombstones: %s
adapters:
  provider:
    type: http
    url: %s/{tool_name}
    timeout: 1s
    key_ttl: %s
    breaker: {consecutive_failures: 0}
  capped:
    type: http
    url: %[4]s/{tool_name}
    timeout: 1s
    key_ttl: %[5]s
    breaker: {consecutive_failures: 0}
    max_concurrency: 1
  fragile:
    type: http
    url: %[4]s/{tool_name}
    timeout: 1s
    key_ttl: %[5]s
    breaker: {consecutive_failures: 1, open_for: 2s}
  tools:
    type: mcp
    url: %s
    timeout: 1s
    key_ttl: %[5]s
%[7]sroutes:
  charge: {adapter: provider, class: key_idempotent, compensation: refund, max_attempts: 8, backoff: {base: 100ms, cap: 1s}, reclaim_hold: 2s}
  refund: {adapter: provider, class: key_idempotent, max_attempts: 6, backoff: {base: 100ms, cap: 1s}, reclaim_hold: 2s}
  note: {adapter: provider, class: key_idempotent, max_attempts: 8, backoff: {base: 100ms, cap: 1s}, reclaim_hold: 2s}
  sms: {adapter: provider, class: non_idempotent, max_attempts: 3, backoff: {base: 100ms, cap: 1s}, reclaim_hold: 2s}
  ledger: {adapter: provider, class: key_idempotent, ordering: business_scope, max_attempts: 8, backoff: {base: 100ms, cap: 1s}, reclaim_hold: 2s}
  quota: {adapter: capped, class: key_idempotent, max_attempts: 8, backoff: {base: 100ms, cap: 1s}, reclaim_hold: 2s}
  flaky: {adapter: fragile, class: key_idempotent, max_attempts: 8, backoff: {base: 100ms, cap: 1s}, reclaim_hold: 2s}
  gw_charge: {adapter: tools, class: key_idempotent, max_attempts: 20, backoff: {base: 100ms, cap: 1s}}
%[8]sgateway:
  wait: 5s
`, modelLease, retention, modelTombstones, baseURL, modelKeyTTL, mcpURL, recvAdapter, recvRoutes)
}

// startReplica starts a replica that reaches Postgres through proxy.
func (e *modelEnv) startReplica(proxy *holdProxy) *daemon {
	e.gen++
	addr := "127.0.0.1:" + strconv.Itoa(freePort(e.t))
	d := startDaemon(e.t, "model-replica-"+strconv.Itoa(e.gen),
		"--config", e.cfgPath, "--database-url", proxy.url(e.t, e.dbURL), "--shutdown-timeout", "5s", "--gateway-addr", addr)
	e.gateways[d.name] = "http://" + addr + "/mcp"
	return d
}

// cli runs an operator command against the model's database.
func (e *modelEnv) cli(args ...string) cliResult {
	args = append(args, "--database-url", e.dbURL)
	return runCLI(e.t, []string{"PGOPTIONS=-c lock_timeout=3000"}, args...)
}

// sequence is one rapid check: a random sequence of steps actions, the
// settle, and the invariants. Actions are drawn from a weighted list whose
// first entry is a short wait: rapid shrinks a failing sequence by turning
// the steps it does not need into waits. An action that does not apply
// (no open transaction, nothing parked…) becomes a wait too.
func (e *modelEnv) sequence(rt *rapid.T) {
	e.seq++
	m := newSeqModel(e, rt, e.seq)
	defer m.closeTxs()
	actions := []struct {
		name string
		fn   func(*rapid.T) bool
	}{
		{"wait", m.actWait},
		{"enqueue", m.actEnqueue}, {"enqueue", m.actEnqueue}, {"enqueue", m.actEnqueue},
		{"begin", m.actBegin}, {"begin", m.actBegin},
		{"enqueue_in_tx", m.actEnqueueInTx}, {"enqueue_in_tx", m.actEnqueueInTx}, {"enqueue_in_tx", m.actEnqueueInTx},
		{"end_tx", m.actEndTx}, {"end_tx", m.actEndTx},
		{"abort_run", m.actAbortRun}, {"abort_run", m.actAbortRun},
		{"operator", m.actOperator}, {"operator", m.actOperator}, {"operator", m.actOperator},
		{"operator", m.actOperator}, {"operator", m.actOperator},
		{"prune", m.actPrune}, {"prune", m.actPrune},
		{"fault", m.actFault},
		{"wait", m.actWait}, {"wait", m.actWait},
	}
	if !e.first {
		actions = append(actions, []struct {
			name string
			fn   func(*rapid.T) bool
		}{
			{"kill_conns", m.actKillConns},
			{"tamper", m.actTamper},
			{"gateway", m.actGateway}, {"gateway", m.actGateway},
			{"unrouted", m.actUnrouted},
			{"refusal", m.actRefusal}, {"refusal", m.actRefusal},
			{"partition", m.actPartition}, {"partition", m.actPartition},
		}...)
	}
	if e.upTo != "" {
		last := 0
		for i, a := range actions {
			if a.name == e.upTo {
				last = i
			}
		}
		actions = actions[:last+1]
	}
	for step := range e.steps {
		a := actions[rapid.IntRange(0, len(actions)-1).Draw(rt, "action")]
		rt.Logf("step %d: %s", step, a.name)
		if !e.allowed(a.name) || !a.fn(rt) {
			m.actWait(rt)
			a.name = "wait"
		}
		m.tally[a.name]++
	}
	m.settle()
	m.verify()
}

// allowed reports whether an action is part of this run's alphabet.
func (e *modelEnv) allowed(action string) bool {
	switch action {
	case "begin", "enqueue_in_tx", "end_tx":
		return !e.without["snapshot"]
	case "prune", "fault", "operator", "tamper", "gateway", "unrouted", "refusal", "partition":
		return !e.without[action]
	case "kill_conns":
		return !e.without["fault"]
	case "abort_run":
		return !e.without["abort"]
	}
	return true
}

// withRetry runs fn until it returns nil or an error that is not a lost
// connection (a Postgres restart), for at most a minute.
func withRetry(fn func(ctx context.Context) error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		err := fn(ctx)
		cancel()
		var pgErr *pgconn.PgError
		if err == nil || errors.As(err, &pgErr) && !strings.HasPrefix(pgErr.Code, "57P") || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sqlState returns the SQLSTATE of err, "" if it has none.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// signalReplica sends sig to a replica, tolerating one that already exited.
func signalReplica(d *daemon, sig syscall.Signal) {
	if !d.exited() {
		_ = d.cmd.Process.Signal(sig)
	}
}

// TestModelOrdersAKeysRowsByWhenTheyLived: a key created again after its
// tombstone expired takes a new place in its run's seq order, and a
// compensation applied while its earlier row lived is judged by the
// earlier row's place (seed 5235 judged one by the later row's, and
// reported a compensation in reverse seq order as out of order).
func TestModelOrdersAKeysRowsByWhenTheyLived(t *testing.T) {
	t0 := time.Now()
	in := &mIntent{order: 1}
	if got := in.orderAt(t0); got != 1 {
		t.Fatalf("a key created once: order %d at any time, want 1", got)
	}
	in.earlier = append(in.earlier, mOrder{order: in.order, until: t0.Add(time.Minute)})
	in.order = 81
	in.earlier = append(in.earlier, mOrder{order: in.order, until: t0.Add(2 * time.Minute)})
	in.order = 90
	for _, c := range []struct {
		at   time.Duration
		want int
	}{{0, 1}, {time.Minute - time.Millisecond, 1}, {time.Minute, 81}, {90 * time.Second, 81}, {2 * time.Minute, 90}, {time.Hour, 90}} {
		if got := in.orderAt(t0.Add(c.at)); got != c.want {
			t.Errorf("order of the row that lived %v after the first was created: %d, want %d", c.at, got, c.want)
		}
	}
}
