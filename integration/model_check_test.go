//go:build integration

package integration

import (
	"context"
	"fmt"
	"github.com/drainer-io/drainer/outbox"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"
)

// seqModel is the reference model of one sequence: what the producers
// committed, in which order, and what agents and operators did.
type seqModel struct {
	e       *modelEnv
	rt      *rapid.T
	prefix  string // agent_run_id prefix of this sequence's runs
	runs    []*mRun
	intents []*mIntent
	txs     []*mTx
	paused  map[string]bool
	order   int // creation order of rows (their seq order)
	txN     int
	tally   map[string]int // what the sequence did, for its summary line
	faulted bool           // a replica was killed or stopped, or Postgres restarted
	prunes  int            // pruning passes so far (every second one, the first included, truncates the audit)
	// truncated holds each key's last status change as read before the
	// model's audit rotations (retention zero) truncated it.
	truncated map[string]auditChange
	// handOvers follow the rows each SIGKILLed replica left in flight
	// (model_liveness_test.go).
	handOvers []*handOver
	// gwCalls are the agent calls made through the gateways
	// (model_gateway_test.go).
	gwCalls []*gwCall
	// unrouted and refusals are the rows whose tools have no route and the
	// runs sent to the refusing provider (model_refusal_test.go).
	unrouted []*mUnrouted
	refusals []*mRefusal
}

type mRun struct {
	id string
	// abortedAt is when an agent's abort_run or an operator's abort of
	// the run returned (zero if neither happened).
	abortedAt time.Time
	// forgottenAt is when the model saw that drainer's retention had
	// forgotten the run's abort (its record goes a tombstone age after its
	// last row did: store.pruneRunsSQL): from then on the id names a new
	// run, which nobody aborted, and whose saga is judged on its own.
	forgottenAt time.Time
}

type mIntent struct {
	run         *mRun
	step, tool  string
	script      []string
	payload     string // as first enqueued
	variant     string // equal as a JSON value, different as text
	key         string
	order       int // creation order, for the saga's reverse seq order
	committed   bool
	committedAt time.Time
	inTx        *mTx // the open transaction that created it
	createdAt   time.Time
	// abortSeen: the run's abort committed before the enqueue that
	// created the row committed (the row must end cancelled, unsent);
	// abortBeforeStmt: even before the enqueue statement ran.
	abortSeen, abortBeforeStmt bool
	opCancelled                bool // an operator cancelled it (its effect may exist)
	humanUndone                bool // its compensation_failed row was resolved by an operator
	recreated                  bool // created again after its tombstone expired
	recreatedAt                time.Time
	// earlier holds the creation orders of its rows before the current
	// one (recreated), each with when the row after it was created: a
	// compensation applied before then is its earlier row's (orderAt).
	earlier []mOrder
}

// mOrder is the creation order of an earlier row of a key, and when the
// row after it was created.
type mOrder struct {
	order int
	until time.Time
}

// orderAt is the creation order of in's row at t: the current row's, or,
// before it was created, the earlier row's that was there then.
func (in *mIntent) orderAt(t time.Time) int {
	for _, o := range in.earlier {
		if t.Before(o.until) {
			return o.order
		}
	}
	return in.order
}

type mTx struct {
	name    string
	iso     pgx.TxIsoLevel
	conn    *pgxpool.Conn
	tx      pgx.Tx
	created []*mIntent
	dead    bool
}

func newSeqModel(e *modelEnv, rt *rapid.T, n int) *seqModel {
	return &seqModel{e: e, rt: rt, prefix: fmt.Sprintf("m%d-", n), paused: map[string]bool{}, tally: map[string]int{},
		truncated: map[string]auditChange{}}
}

var isoLevels = []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable}

func isoName(l pgx.TxIsoLevel) string {
	return map[pgx.TxIsoLevel]string{pgx.ReadCommitted: "RC", pgx.RepeatableRead: "RR", pgx.Serializable: "SER"}[l]
}

// Answers per tool: every class of §5 (docs/reference.md) the route may
// meet. A key_idempotent provider's terminal answers (mismatch, 422) fail
// the row; the non_idempotent route parks on anything ambiguous.
var (
	idempotentAnswers = []string{ansOK, ansMismatch, ansInFlight, ans425, ans408, ans429RA, ans429, ans503RA,
		ans500, ans422, ans401, ansDrop, ansSlow, ansLate}
	smsAnswers    = []string{ansOK, ans503RA, ans500, ans422, ans401, ansDrop, ansSlow, ansLate}
	refundAnswers = []string{ansOK, ans500, ans429RA, ans422, ansDrop}
)

// --- actions -----------------------------------------------------------

// actEnqueue enqueues one to three intents in a transaction of their own
// at a random isolation level (retried on 40001, like a producer).
func (m *seqModel) actEnqueue(rt *rapid.T) bool {
	iso := rapid.SampledFrom(isoLevels).Draw(rt, "iso")
	batch := rapid.Bool().Draw(rt, "batch")
	for try := 0; try < 3; try++ {
		x := m.begin(iso, false)
		if x == nil {
			return true
		}
		targets, variants := m.drawTargets(rt, x, batch)
		m.enqueueIn(x, targets, variants, batch)
		if x.dead {
			m.rollback(x, "failed enqueue")
			continue
		}
		m.commit(x)
		return true
	}
	return true
}

// actBegin opens a transaction kept across later steps; its snapshot is
// taken at once (a SELECT), as a producer reading its own tables would.
func (m *seqModel) actBegin(rt *rapid.T) bool {
	if len(m.txs) >= 2 {
		return false
	}
	iso := rapid.SampledFrom(isoLevels).Draw(rt, "iso")
	if x := m.begin(iso, true); x != nil {
		m.txs = append(m.txs, x)
	}
	return true
}

func (m *seqModel) actEnqueueInTx(rt *rapid.T) bool {
	if len(m.txs) == 0 {
		return false
	}
	x := m.txs[rapid.IntRange(0, len(m.txs)-1).Draw(rt, "tx")]
	batch := rapid.Bool().Draw(rt, "batch")
	targets, variants := m.drawTargets(rt, x, batch)
	m.enqueueIn(x, targets, variants, batch)
	if x.dead {
		m.rollback(x, "failed enqueue")
	}
	return true
}

func (m *seqModel) actEndTx(rt *rapid.T) bool {
	if len(m.txs) == 0 {
		return false
	}
	x := m.txs[rapid.IntRange(0, len(m.txs)-1).Draw(rt, "tx")]
	if rapid.IntRange(0, 3).Draw(rt, "rollback") == 0 {
		m.rollback(x, "rollback")
	} else {
		m.commit(x)
	}
	return true
}

// actAbortRun is an agent's drainer.abort_run in its own transaction.
func (m *seqModel) actAbortRun(rt *rapid.T) bool {
	if len(m.runs) == 0 {
		return false
	}
	r := m.runs[rapid.IntRange(0, len(m.runs)-1).Draw(rt, "run")]
	var n int
	err := withRetry(func(ctx context.Context) error {
		return m.e.pool.QueryRow(ctx, "SELECT drainer.abort_run($1, 'model: agent abort')", r.id).Scan(&n)
	})
	if err != nil {
		if s := sqlState(err); s == "55P03" || s == "40001" || s == "40P01" {
			m.rt.Logf("abort_run %s: %v (lock held by an open transaction)", r.id, err)
			return true
		}
		m.rt.Fatalf("abort_run %s: %v", r.id, err)
	}
	if r.abortedAt.IsZero() {
		r.abortedAt = time.Now()
	}
	m.rt.Logf("abort_run %s: %d rows cancelled", r.id, n)
	return true
}

// actOperator runs one operator command through the CLI.
func (m *seqModel) actOperator(rt *rapid.T) bool {
	op := rapid.SampledFrom([]string{"pause", "resume", "requeue", "cancel", "cancel_run", "resolve", "abort"}).Draw(rt, "op")
	who := []string{"--actor", "model", "--reason", "model"}
	var res cliResult
	switch op {
	case "pause", "resume":
		tool := rapid.SampledFrom([]string{toolCharge, toolNote, toolSMS, toolRefund}).Draw(rt, "route")
		if m.paused[tool] == (op == "pause") {
			op = map[string]string{"pause": "resume", "resume": "pause"}[op]
		}
		res = m.e.cli(append([]string{op, tool}, who...)...)
		if res.code == 0 {
			m.paused[tool] = op == "pause"
		}
	case "requeue", "cancel":
		keys := m.rowsWith(rt, op)
		if len(keys) == 0 {
			return false
		}
		key := rapid.SampledFrom(keys).Draw(rt, "key")
		res = m.e.cli(append([]string{op, key}, who...)...)
		if op == "cancel" && res.code == 0 {
			m.intentByKey(key).opCancelled = true
		}
		if op == "requeue" && res.code == 0 {
			m.revived(res.stdout)
		}
	case "cancel_run", "abort":
		if len(m.runs) == 0 {
			return false
		}
		r := rapid.SampledFrom(m.runs).Draw(rt, "run")
		if op == "abort" {
			res = m.e.cli("abort", r.id, "--actor", "model", "--reason", "model: operator abort")
			if res.code == 0 && r.abortedAt.IsZero() {
				r.abortedAt = time.Now()
			}
		} else {
			res = m.e.cli(append([]string{"cancel", "--run", r.id}, who...)...)
			if res.code == 0 {
				for _, in := range m.intents {
					if in.run == r && in.committed {
						in.opCancelled = true
					}
				}
			}
		}
	case "resolve":
		parked := m.parkedRows()
		if len(parked) == 0 {
			return false
		}
		key := rapid.SampledFrom(parked).Draw(rt, "key")
		args := []string{"resolve", key, "--note", "model: checked with the provider", "--actor", "model"}
		if in := m.intentByKey(key); in != nil { // a forward row parked outcome_unknown
			outcome := "failed"
			if m.e.provider.key(key).effects > 0 {
				outcome = "succeeded"
			}
			args = append(args, "--outcome", outcome)
		}
		run, step := m.rowTuple(key)
		res = m.e.cli(args...)
		if in := m.intentByTuple(run, step); res.code == 0 && in != nil && m.intentByKey(key) == nil {
			in.humanUndone = true // its compensation row was resolved: a human undid the effect
		}
	}
	m.tally[fmt.Sprintf("%s exit %d", op, res.code)]++
	if res.code == 2 {
		m.rt.Fatalf("operator %s: usage error: %s", op, res)
	}
	m.rt.Logf("operator %s: exit %d %s", op, res.code, strings.TrimSpace(tail(res.stdout+res.stderr, 300)))
	return true
}

// revived notes the runs a requeue revived (docs/cli.md, requeue: a run
// aborted only by failures whose saga has not started is revived, with the
// rows its abort cancelled pending again): the run is no longer aborted, so
// its intents enqueued while it was (cancelled then, or still waiting for
// their claim) go out after all.
func (m *seqModel) revived(out string) {
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(line, "revived run ")
		if !ok {
			continue
		}
		run, _, _ := strings.Cut(rest, " ")
		for _, in := range m.intents {
			if in.run.id == run {
				in.abortSeen, in.abortBeforeStmt = false, false
			}
		}
	}
}

// actPrune runs a pruning pass directly with windows of zero for every
// terminal status (tombstones kept for the key_ttl, as the config demands).
func (m *seqModel) actPrune(rt *rapid.T) bool {
	st, err := store.New("drainer")
	if err != nil {
		m.rt.Fatal(err)
	}
	r := store.Retention{
		ByStatus:   map[outbox.Status]time.Duration{outbox.StatusSucceeded: 0, outbox.StatusCancelled: 0, outbox.StatusCompensated: 0, outbox.StatusFailed: 0},
		Tombstones: modelTombstones, Audit: time.Hour, BatchSize: 500,
		// As the daemons pass it: charge and hold name a compensation,
		// whose window is the default (7 days).
		Compensable: map[string]time.Duration{toolCharge: 7 * 24 * time.Hour, toolHold: 7 * 24 * time.Hour},
	}
	var out map[string]int
	err = withRetry(func(ctx context.Context) error {
		var err error
		out, err = st.Prune(ctx, m.e.pool, r, 5*time.Second)
		return err
	})
	if err != nil {
		m.rt.Fatalf("prune: %v", err)
	}
	m.rt.Logf("prune: %v", out)
	m.rotate(st)
	// Every second pass, the first included, also truncates the audit
	// (counted, not drawn, so that the fixed seeds keep their sequences).
	if m.prunes++; m.prunes%2 == 1 {
		m.rotateAudit(st)
	}
	return true
}

// rotateAudit turns the audit's generations with a retention and a span of
// zero, as far as they go now: every generation closed, anchored and
// truncated as soon as no transaction could still see it (the daemons keep
// theirs at an hour). Chains must verify all the same.
func (m *seqModel) rotateAudit(st *store.Store) {
	var keys []string
	for _, in := range m.intents {
		keys = append(keys, in.key)
	}
	forgotten := m.forgottenWithAnchors(keys)
	var steps []string
	for range 50 {
		var step string
		err := withRetry(func(ctx context.Context) error {
			// What the step may truncate, read first: once sealed, a
			// generation takes no more changes.
			if err := m.readChanges(ctx, keys, m.truncated); err != nil {
				return err
			}
			var err error
			step, err = st.RotateAudit(ctx, m.e.pool, 0, 0)
			return err
		})
		if err != nil {
			m.rt.Fatalf("rotate audit: %v", err)
		}
		if step == "idle" || step == "waiting" || step == "busy" {
			break
		}
		if strings.HasPrefix(step, "truncated ") && step != "truncated 0" {
			m.tally["audit truncated"]++
		}
		steps = append(steps, step)
	}
	m.rt.Logf("rotate audit: %v", steps)
	m.checkAnchored(keys)
	m.checkRetired(forgotten, steps)
}

// forgottenWithAnchors lists the keys whose chain is forgotten (no row,
// no tombstone, no entry left: audit_chain_forgotten) and still has an
// anchor version.
func (m *seqModel) forgottenWithAnchors(keys []string) []string {
	var out []string
	err := withRetry(func(ctx context.Context) error {
		var err error
		out, err = m.forgottenWithAnchorsIn(ctx, keys)
		return err
	})
	if err != nil {
		m.rt.Fatalf("read the forgotten chains: %v", err)
	}
	return out
}

// checkRetired: the anchors are bounded by the chains that can still be
// extended or checked. A chain forgotten before a truncation has no anchor
// version left once the sweep that the truncation started is over, unless
// it is the evidence of tampering (a sequence that tampered is not held to
// it: an anchors record that no longer digests as recorded keeps every
// version it holds).
func (m *seqModel) checkRetired(forgotten, steps []string) {
	truncated := slices.ContainsFunc(steps, func(s string) bool { return strings.HasPrefix(s, "truncated ") })
	if len(forgotten) == 0 || !truncated || len(m.e.tampered) > 0 {
		return
	}
	var swept bool
	var left []string
	err := withRetry(func(ctx context.Context) error {
		if err := m.e.pool.QueryRow(ctx, `SELECT after_record IS NULL FROM drainer.audit_sweep`).Scan(&swept); err != nil {
			return err
		}
		var err error
		left, err = m.forgottenWithAnchorsIn(ctx, forgotten)
		return err
	})
	if err != nil {
		m.rt.Fatalf("read the anchors after the sweep: %v", err)
	}
	if !swept {
		return // the rotation stopped mid-sweep (busy, or its step bound)
	}
	m.tally["forgotten chains retired"] += len(forgotten) - len(left)
	if len(left) > 0 {
		m.rt.Fatalf("keys %v: their chains were forgotten before the audit's truncation, and the sweep after it (%v) left their anchors", left, steps)
	}
}

func (m *seqModel) forgottenWithAnchorsIn(ctx context.Context, keys []string) ([]string, error) {
	rows, err := m.e.pool.Query(ctx, `SELECT DISTINCT v.key
	    FROM (SELECT key FROM drainer.audit_anchors UNION ALL SELECT key FROM drainer.audit_anchor_history) v
	   WHERE v.key = ANY($1) AND drainer.audit_chain_forgotten(v.key) ORDER BY 1`, keys)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// checkAnchored: what the model's audit truncations took, drainer still
// proves. Each key of the sequence whose last status change is gone from
// the audit holds that status in its anchor (keys tampered with aside: the
// tamperer may have edited or deleted the change the model read), until
// its chain is forgotten (no row, no tombstone, no entry) and its anchor
// gone with a sweep.
func (m *seqModel) checkAnchored(keys []string) {
	for k, c := range m.lastRecorded(keys) {
		if !c.fromTruncated || (c.forgotten && c.anchored == "") {
			continue // (a forgotten chain's anchor goes with the sweep: checkRetired)
		}
		if _, tampered := m.e.tampered[k]; tampered {
			continue
		}
		m.tally["truncated changes anchored"]++
		if c.anchored != c.status {
			m.rt.Fatalf("key %s: its last status change (%s, %v ago) was truncated from the audit, and its anchor holds status %q",
				k, c.status, c.ago.Round(time.Millisecond), c.anchored)
		}
	}
}

// rotate turns the queue's generations as far as they go now, with sizes
// that close a generation as soon as it holds a settled row and move one
// to three rows at a time (by the pass, not drawn: the fixed seeds keep
// their sequences), so that the rows of the sequence move between
// generations, and generations are truncated, among the daemons' claims
// and completions, the operators' actions and the producers' transactions
// held open (the daemons rotate too, at their own sizes). No move takes
// more rows than it was asked for: the bound on how long a move holds
// its generation, which every claim waits for, is its size.
func (m *seqModel) rotate(st *store.Store) {
	r := store.Rotation{FlipRows: 1 << 40, IdleRows: 1, FlipAge: time.Millisecond, Chunk: 3, Move: m.prunes % 3}
	var steps []string
	for range 200 {
		var step store.RotateStep
		err := withRetry(func(ctx context.Context) error {
			var err error
			step, err = st.RotateQueue(ctx, m.e.pool, r)
			return err
		})
		if err != nil {
			m.rt.Fatalf("rotate: %v", err)
		}
		if step.Kind == "moved" && step.Moved > int64(r.MoveRows()) {
			m.rt.Fatalf("rotate: a move of %d rows when %d were asked for", step.Moved, r.MoveRows())
		}
		if !step.More() {
			break
		}
		steps = append(steps, step.Kind)
		time.Sleep(2 * time.Millisecond) // a new generation must be older than FlipAge
	}
	m.rt.Logf("rotate: %v", steps)
}

// actFault injects one fault: a replica SIGKILLed (and restarted), one
// SIGSTOPped (until a later SIGCONT or the settle), or a Postgres restart.
func (m *seqModel) actFault(rt *rapid.T) bool {
	e := m.e
	m.faulted = true
	switch rapid.SampledFrom([]string{"sigkill", "sigstop", "sigcont", "pg_restart"}).Draw(rt, "fault") {
	case "sigkill":
		i := rapid.IntRange(0, len(e.replicas)-1).Draw(rt, "replica")
		r := e.replicas[i]
		if !r.stopped.IsZero() {
			m.cont(r)
		}
		pid, killedAt := r.d.pid(), time.Now()
		signalReplica(r.d, syscall.SIGKILL)
		r.d.wait(30 * time.Second)
		m.watchHandOver(pid, killedAt)
		r.d = e.startReplica(r.proxy)
		m.rt.Logf("SIGKILL replica %d, restarted as %s", i, r.d.name)
	case "sigstop":
		for i, r := range e.replicas {
			if !r.stopped.IsZero() {
				return false
			}
			_ = i
		}
		i := rapid.IntRange(0, len(e.replicas)-1).Draw(rt, "replica")
		signalReplica(e.replicas[i].d, syscall.SIGSTOP)
		e.replicas[i].stopped = time.Now()
		e.noteAbility()
		m.rt.Logf("SIGSTOP replica %d", i)
	case "sigcont":
		for i, r := range e.replicas {
			if !r.stopped.IsZero() {
				m.cont(r)
				m.rt.Logf("SIGCONT replica %d", i)
				return true
			}
		}
		return false
	case "pg_restart":
		m.disturb("postgres restart")
		for len(m.txs) > 0 {
			m.rollback(m.txs[0], "postgres restart")
		}
		ctx, cancel := context.WithTimeout(context.Background(), pgControlTimeout)
		defer cancel()
		if err := e.cluster.Shutdown(ctx); err != nil {
			m.rt.Fatalf("shut postgres down: %v", err)
		}
		// Down for a while: each replica's claim loop and periodic
		// subsystems run many times against a server that answers nothing.
		down := time.Now()
		time.Sleep(time.Duration(rapid.IntRange(0, 2000).Draw(rt, "pg_down_ms")) * time.Millisecond)
		up := time.Now()
		if err := e.cluster.Startup(ctx); err != nil {
			m.rt.Fatalf("start postgres again: %v", err)
		}
		m.checkNoBackWhileDown(down, up)
		if err := withRetry(func(ctx context.Context) error {
			_, err := e.pool.Exec(ctx, "SELECT 1")
			return err
		}); err != nil {
			m.rt.Fatalf("after the postgres restart: %v", err)
		}
		m.rt.Logf("postgres restarted")
	}
	return true
}

func (m *seqModel) cont(r *modelReplica) {
	signalReplica(r.d, syscall.SIGCONT)
	now := time.Now()
	// A request the replica prepared before the stop may go out now: a
	// zombie no lease check can stop (its completion is fenced).
	m.e.zombies = append(m.e.zombies, lossWindow{from: now, to: now.Add(3 * time.Second)})
	r.stopped = time.Time{}
	m.e.noteAbility()
}

func (m *seqModel) actWait(rt *rapid.T) bool {
	d := time.Duration(rapid.IntRange(100, 4000).Draw(rt, "ms")) * time.Millisecond
	time.Sleep(d)
	return true
}

// --- producers ---------------------------------------------------------

// begin opens a transaction at iso; with snapshot it takes its snapshot
// at once.
func (m *seqModel) begin(iso pgx.TxIsoLevel, snapshot bool) *mTx {
	m.txN++
	x := &mTx{name: fmt.Sprintf("tx%d/%s", m.txN, isoName(iso)), iso: iso}
	err := withRetry(func(ctx context.Context) error {
		conn, err := m.e.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
		if err == nil && snapshot {
			_, err = tx.Exec(ctx, "SELECT count(*) FROM drainer.outbox")
		}
		if err != nil {
			conn.Release()
			return err
		}
		x.conn, x.tx = conn, tx
		return nil
	})
	if err != nil {
		m.rt.Fatalf("begin %s: %v", x.name, err)
	}
	if snapshot {
		m.rt.Logf("%s: begun, snapshot taken", x.name)
	}
	return x
}

// drawTargets picks the intents of one enqueue: new ones, or tuples
// enqueued before (with the same payload, or one equal as a JSON value).
// A tuple created by another open transaction is never picked: the call
// would wait for that transaction.
func (m *seqModel) drawTargets(rt *rapid.T, x *mTx, batch bool) ([]*mIntent, []bool) {
	n := 1
	if batch {
		n = rapid.IntRange(1, 3).Draw(rt, "batch_size")
	}
	var targets []*mIntent
	var variants []bool
	for range n {
		var old []*mIntent
		for _, in := range m.intents {
			if (in.inTx == nil || in.inTx == x) && !slices.Contains(targets, in) {
				old = append(old, in)
			}
		}
		var in *mIntent
		if len(old) > 0 && rapid.IntRange(0, 2).Draw(rt, "again") == 0 {
			in = rapid.SampledFrom(old).Draw(rt, "tuple")
		} else {
			in = m.newIntent(rt)
		}
		targets = append(targets, in)
		variants = append(variants, rapid.Bool().Draw(rt, "variant") && !m.e.without["variant"])
	}
	return targets, variants
}

func (m *seqModel) newIntent(rt *rapid.T) *mIntent {
	var r *mRun
	if len(m.runs) == 0 || rapid.IntRange(0, 2).Draw(rt, "new_run") == 0 {
		r = &mRun{id: m.prefix + "run" + strconv.Itoa(len(m.runs))}
		m.runs = append(m.runs, r)
	} else {
		r = rapid.SampledFrom(m.runs).Draw(rt, "run")
	}
	tool := rapid.SampledFrom([]string{toolCharge, toolCharge, toolNote, toolSMS}).Draw(rt, "tool")
	if tool == toolCharge && m.e.without["saga"] {
		tool = toolNote
	}
	answers := idempotentAnswers
	if tool == toolSMS {
		answers = smsAnswers
	}
	script := rapid.SliceOfN(rapid.SampledFrom(answers), 0, 3).Draw(rt, "script")
	var rscript []string
	if tool == toolCharge {
		rscript = rapid.SliceOfN(rapid.SampledFrom(refundAnswers), 0, 2).Draw(rt, "refund_script")
	}
	in := &mIntent{run: r, step: "s" + strconv.Itoa(len(m.intents)), tool: tool, script: script}
	q := func(xs []string) string {
		parts := make([]string, len(xs))
		for i, x := range xs {
			parts[i] = strconv.Quote(x)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	// every third intent carries 70 kB more, more than the replicas'
	// max_in_flight_bytes (64KiB, modelConfig): such a row goes out as its claim's first,
	// and due rows are withheld from claims while it is in flight (the pad
	// is not drawn: the regression seeds keep their sequences)
	pad := ""
	if len(m.intents)%3 == 2 {
		pad = strings.Repeat("p", 70_000)
	}
	in.payload = fmt.Sprintf(`{"n": 1, "s": %s, "rs": %s, "pad": %q}`, q(script), q(rscript), pad)
	in.variant = fmt.Sprintf(`{"pad": %q, "rs": %s, "s": %s, "n": 1.0}`, pad, q(rscript), q(script))
	m.intents = append(m.intents, in)
	return in
}

// enqueueIn runs drainer.enqueue (or enqueue_batch) for targets in x and
// checks the answer against the model. A refusal a producer must expect
// (40001, or a lock the model's own open transaction holds) marks x dead.
func (m *seqModel) enqueueIn(x *mTx, targets []*mIntent, variants []bool, batch bool) {
	payloads := make([]string, len(targets))
	for i, in := range targets {
		payloads[i] = in.payload
		if variants[i] {
			payloads[i] = in.variant
		}
	}
	abortedBefore := m.abortedRuns(targets)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	type answer struct {
		key     string
		created bool
	}
	answers := make([]answer, len(targets))
	var err error
	if batch {
		runs, steps, tools, scopes := make([]string, len(targets)), make([]string, len(targets)), make([]string, len(targets)), make([]string, len(targets))
		for i, in := range targets {
			runs[i], steps[i], tools[i], scopes[i] = in.run.id, in.step, in.tool, "scope"
		}
		var rows pgx.Rows
		rows, err = x.tx.Query(ctx, `SELECT ord, key, created FROM drainer.enqueue_batch($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]::jsonb[])`,
			runs, steps, tools, scopes, payloads)
		if err == nil {
			for rows.Next() {
				var ord int
				var a answer
				if err = rows.Scan(&ord, &a.key, &a.created); err != nil {
					break
				}
				if ord < 1 || ord > len(targets) {
					m.rt.Fatalf("enqueue_batch answered ord %d for %d rows", ord, len(targets))
				}
				answers[ord-1] = a
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
	} else {
		in := targets[0]
		err = x.tx.QueryRow(ctx, "SELECT key, created FROM drainer.enqueue($1, $2, $3, 'scope', $4::jsonb)",
			in.run.id, in.step, in.tool, payloads[0]).Scan(&answers[0].key, &answers[0].created)
	}
	what := fmt.Sprintf("%s: enqueue", x.name)
	if batch {
		what += "_batch"
	}
	for i, in := range targets {
		what += fmt.Sprintf(" [%s/%s %s variant=%v]", in.run.id, in.step, in.tool, variants[i])
	}
	if err != nil {
		switch s := sqlState(err); s {
		case "40001", "40P01", "55P03", "57014", "25P02":
			m.rt.Logf("%s: %v (the transaction is dead)", what, err)
			x.dead = true
			return
		case "23505":
			m.rt.Fatalf("%s: refused with 23505 although every payload equals the committed one as a JSON value: %v", what, err)
		case "":
			m.rt.Logf("%s: %v (connection lost; the transaction is dead)", what, err)
			x.dead = true
			return
		default:
			m.rt.Fatalf("%s: %v", what, err)
		}
	}
	now := time.Now()
	for i, in := range targets {
		a := answers[i]
		if in.key != "" && in.key != a.key {
			m.rt.Fatalf("%s: tuple %s/%s answered key %s, earlier %s", what, in.run.id, in.step, a.key, in.key)
		}
		in.key = a.key
		switch {
		case in.committed:
			if a.created {
				if now.Sub(in.committedAt) < modelTombstones {
					m.rt.Fatalf("%s: tuple %s/%s (key %s) committed %v ago answered created=true: a second row for a key whose row or tombstone must still answer it",
						what, in.run.id, in.step, in.key, now.Sub(in.committedAt).Round(time.Millisecond))
				}
				// A new row for a forgotten key: drainer sends it as a new
				// intent (the provider may apply it again), and it takes
				// its place in its run's seq order anew.
				in.recreated, in.recreatedAt = true, now
				// Its run's abort as this statement found it: one
				// forgotten by retention since the first row (a tombstone
				// age after the run's last row went) names a new run,
				// which nobody aborted, and the new row goes out.
				in.abortBeforeStmt = abortedBefore[in.run.id]
				in.abortSeen = in.abortBeforeStmt
				in.earlier = append(in.earlier, mOrder{order: in.order, until: now})
				m.order++
				in.order = m.order
			}
		case in.inTx == x:
			if a.created {
				m.rt.Fatalf("%s: tuple %s/%s created twice in one transaction", what, in.run.id, in.step)
			}
		default:
			if !a.created {
				m.rt.Fatalf("%s: new tuple %s/%s answered created=false", what, in.run.id, in.step)
			}
			in.inTx = x
			in.createdAt = now
			in.abortBeforeStmt = abortedBefore[in.run.id]
			m.order++
			in.order = m.order
			x.created = append(x.created, in)
		}
	}
	m.rt.Logf("%s: ok %v", what, answers)
}

// abortedRuns reports which runs of targets are aborted now, as a new
// READ COMMITTED transaction sees them (or as the model knows them, while
// drainer must still remember the abort). A run the model aborted that
// drainer no longer holds, more than a tombstone age later, was forgotten
// by retention: the model forgets its abort too (mRun.forgottenAt).
func (m *seqModel) abortedRuns(targets []*mIntent) map[string]bool {
	out := map[string]bool{}
	var ids []string
	for _, in := range targets {
		ids = append(ids, in.run.id)
		if !in.run.abortedAt.IsZero() && time.Since(in.run.abortedAt) < modelTombstones {
			out[in.run.id] = true
		}
	}
	defer func() {
		for _, in := range targets {
			if r := in.run; !r.abortedAt.IsZero() && !out[r.id] {
				m.rt.Logf("run %s: its abort (%s) forgotten by retention; the id names a new run", r.id, r.abortedAt.Format("15:04:05.000"))
				r.abortedAt, r.forgottenAt = time.Time{}, time.Now()
			}
		}
	}()
	err := withRetry(func(ctx context.Context) error {
		rows, err := m.e.pool.Query(ctx, "SELECT agent_run_id FROM drainer.runs WHERE agent_run_id = ANY($1)", ids)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			out[id] = true
		}
		return rows.Err()
	})
	if err != nil {
		m.rt.Fatalf("read runs: %v", err)
	}
	return out
}

func (m *seqModel) commit(x *mTx) {
	aborted := m.abortedRuns(x.created)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	err := x.tx.Commit(ctx)
	cancel()
	if err != nil {
		m.rt.Logf("%s: commit: %v (rolled back)", x.name, err)
		m.forget(x)
		return
	}
	now := time.Now()
	for _, in := range x.created {
		in.committed, in.committedAt, in.inTx = true, now, nil
		in.abortSeen = aborted[in.run.id]
	}
	m.rt.Logf("%s: committed (%d rows created)", x.name, len(x.created))
	m.drop(x)
}

func (m *seqModel) rollback(x *mTx, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = x.tx.Rollback(ctx)
	cancel()
	m.rt.Logf("%s: rolled back (%s)", x.name, why)
	m.forget(x)
}

// forget undoes the creations of a transaction that did not commit.
func (m *seqModel) forget(x *mTx) {
	for _, in := range x.created {
		in.inTx, in.order = nil, 0
	}
	m.drop(x)
}

func (m *seqModel) drop(x *mTx) {
	x.conn.Release()
	m.txs = slices.DeleteFunc(m.txs, func(y *mTx) bool { return y == x })
}

func (m *seqModel) closeTxs() {
	for len(m.txs) > 0 {
		m.rollback(m.txs[0], "sequence over")
	}
}

// --- reading the database ------------------------------------------------

func (m *seqModel) intentByKey(key string) *mIntent {
	for _, in := range m.intents {
		if in.key == key && in.committed {
			return in
		}
	}
	return nil
}

// rowsWith returns the keys of the sequence's committed rows, those an
// operator would pick for op first (failed or cancelled rows for requeue,
// pending ones for cancel) when there are any.
func (m *seqModel) rowsWith(rt *rapid.T, op string) []string {
	var all []string
	for _, in := range m.intents {
		if in.committed {
			all = append(all, in.key)
		}
	}
	want := []string{"failed", "cancelled"}
	if op == "cancel" {
		want = []string{"pending"}
	}
	var preferred []string
	for k, st := range m.statuses(all) {
		if slices.Contains(want, st) {
			preferred = append(preferred, k)
		}
	}
	slices.Sort(preferred)
	if len(preferred) > 0 && rapid.Bool().Draw(rt, "prefer_"+op) {
		return preferred
	}
	return all
}

// statuses returns drainer.result's status of each key (pruned rows
// answer from their tombstone; unknown keys are absent).
func (m *seqModel) statuses(keys []string) map[string]string {
	out := map[string]string{}
	err := withRetry(func(ctx context.Context) error {
		rows, err := m.e.pool.Query(ctx, "SELECT k, r.status FROM unnest($1::text[]) k, LATERAL drainer.result(k) r", keys)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k, st string
			if err := rows.Scan(&k, &st); err != nil {
				return err
			}
			out[k] = st
		}
		return rows.Err()
	})
	if err != nil {
		m.rt.Fatalf("read statuses: %v", err)
	}
	return out
}

// parkedRows returns the sequence's rows waiting for a human.
func (m *seqModel) parkedRows() []string {
	var keys []string
	err := withRetry(func(ctx context.Context) error {
		keys = nil
		rows, err := m.e.pool.Query(ctx, `SELECT key FROM drainer.outbox WHERE agent_run_id LIKE $1
		   AND status IN ('outcome_unknown', 'compensation_failed') ORDER BY key`, m.prefix+"%")
		if err != nil {
			return err
		}
		keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		m.rt.Fatalf("read parked rows: %v", err)
	}
	return keys
}

// rowTuple returns the run and step of a row of the outbox ("" if gone).
func (m *seqModel) rowTuple(key string) (run, step string) {
	_ = withRetry(func(ctx context.Context) error {
		err := m.e.pool.QueryRow(ctx, "SELECT agent_run_id, step_id FROM drainer.outbox WHERE key = $1", key).Scan(&run, &step)
		if err == pgx.ErrNoRows {
			return nil
		}
		return err
	})
	return run, step
}

// intentByTuple returns the committed intent of a run's step.
func (m *seqModel) intentByTuple(run, step string) *mIntent {
	for _, in := range m.intents {
		if in.run.id == run && in.step == step && in.committed {
			return in
		}
	}
	return nil
}
