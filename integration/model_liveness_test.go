//go:build integration

package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/jackc/pgx/v5"
	"pgregory.net/rapid"
)

// The model's liveness invariants: what must happen within a bound, not
// only what must never happen (docs/reliability.md, "The model-checked
// random test").

// handOverBound is how long after its lease expired a row stranded by a
// SIGKILLed replica may stay under that dead lease: the reclaimer's
// interval (2s) and ample room for a loaded machine. Release 21 passed it
// (the reclaim came on time) but set the row's floor an hour out; the floor
// is checked apart (handOverFloorSlack).
const modelHandOverBound = 15 * time.Second

// modelHandOverFloorSlack is what a reclaimed row's floor may exceed its
// lease expiry by beyond what drainer knows (the config's reclaim_hold and
// the provider's longest Retry-After, both 2s): clock rounding.
const modelHandOverFloorSlack = 250 * time.Millisecond

// modelKnownHold is the longest hold a reclaimed row of the model may get:
// its routes' reclaim_hold, and the provider's longest Retry-After (429ra).
const modelKnownHold = 2 * time.Second

// handOver follows the rows a SIGKILLed replica left in flight until each
// has left that dead lease.
type handOver struct {
	pid      int
	killedAt time.Time
	expiry   map[string]time.Time // key -> lease_expires_at (database clock, this machine's)

	mu        sync.Mutex
	left      map[string]time.Time // key -> first seen off the dead lease
	floor     map[string]time.Time // key -> its not_before then (zero: none)
	disturbed string               // a fault that may delay every replica (a Postgres restart)
	done      chan struct{}
}

// watchHandOver starts following the rows replica pid held in flight when
// it was SIGKILLed at killedAt.
func (m *seqModel) watchHandOver(pid int, killedAt time.Time) {
	h := &handOver{pid: pid, killedAt: killedAt, expiry: map[string]time.Time{},
		left: map[string]time.Time{}, floor: map[string]time.Time{}, done: make(chan struct{})}
	err := withRetry(func(ctx context.Context) error {
		rows, err := m.e.pool.Query(ctx, `SELECT key, lease_expires_at FROM drainer.outbox
			WHERE status = 'in_flight' AND leased_by LIKE '%:' || $1::text`, strconv.Itoa(pid))
		if err != nil {
			return err
		}
		var key string
		var at time.Time
		_, err = pgx.ForEachRow(rows, []any{&key, &at}, func() error { h.expiry[key] = at; return nil })
		return err
	})
	if err != nil {
		m.rt.Fatalf("rows left in flight by the killed replica: %v", err)
	}
	m.handOvers = append(m.handOvers, h)
	m.tally["stranded rows"] += len(h.expiry)
	go h.watch(m)
}

// watch polls the stranded rows every 100ms until each has left the dead
// lease (reclaimed, or settled by the statement the replica sent before
// it died), recording when it was first seen so and its floor then.
func (h *handOver) watch(m *seqModel) {
	defer close(h.done)
	keys := make([]string, 0, len(h.expiry))
	for k := range h.expiry {
		keys = append(keys, k)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		polled := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rows, err := m.e.pool.Query(ctx, `SELECT key, not_before FROM drainer.outbox
			WHERE key = ANY($1) AND NOT (status = 'in_flight' AND leased_by LIKE '%:' || $2::text)`, keys, strconv.Itoa(h.pid))
		if err == nil {
			var key string
			var nb *time.Time
			_, err = pgx.ForEachRow(rows, []any{&key, &nb}, func() error {
				h.mu.Lock()
				defer h.mu.Unlock()
				if _, seen := h.left[key]; !seen {
					h.left[key] = polled // left at or before this poll began
					if nb != nil {
						h.floor[key] = *nb
					}
				}
				return nil
			})
		}
		cancel()
		h.mu.Lock()
		all := len(h.left) == len(h.expiry)
		h.mu.Unlock()
		if all {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// disturb marks the hand-overs still under way as delayed by a fault that
// stops every replica's work (a Postgres restart): their bounds are not
// checked.
func (m *seqModel) disturb(why string) {
	for _, h := range m.handOvers {
		select {
		case <-h.done:
		default:
			h.mu.Lock()
			h.disturbed = why
			h.mu.Unlock()
		}
	}
}

// ableChange is a change in whether any replica can reclaim a row: one
// that is neither SIGSTOPped nor cut off Postgres.
type ableChange struct {
	at  time.Time
	any bool
}

// noteAbility records, after a replica was SIGSTOPped or resumed, cut off
// Postgres or healed, whether any replica can now reclaim rows.
func (e *modelEnv) noteAbility() {
	able := false
	for _, r := range e.replicas {
		able = able || (r.stopped.IsZero() && !r.proxy.partitioned())
	}
	if n := len(e.ability); n == 0 || e.ability[n-1].any != able {
		e.ability = append(e.ability, ableChange{at: time.Now(), any: able})
	}
}

// ableDuring is how much of [from, to] some replica could reclaim rows
// in: the hand-over bound runs only then (a restarted replica's start
// included: a few seconds of the bound).
func (e *modelEnv) ableDuring(from, to time.Time) time.Duration {
	var d time.Duration
	span := func(a, b time.Time) {
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		if b.After(a) {
			d += b.Sub(a)
		}
	}
	able, since := true, from // every replica able until the first change
	for _, c := range e.ability {
		if able {
			span(since, c.at)
		}
		able, since = c.any, c.at
	}
	if able {
		span(since, to)
	}
	return d
}

// checkNoBackWhileDown: a replica says "database back" only after a
// statement the database answered, so never while the server was down
// (from down to up). A claim pass that ran no statement (no free worker
// slot) once said it, every poll of an outage. A line within backSlack of
// down may report an answer read just before the shutdown.
func (m *seqModel) checkNoBackWhileDown(down, up time.Time) {
	const backSlack = time.Second
	for _, r := range m.e.replicas {
		for _, line := range strings.Split(r.d.stderr.String(), "\n") {
			if !strings.Contains(line, `msg="database back"`) {
				continue
			}
			field, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
			at, err := time.Parse(time.RFC3339Nano, field)
			if err != nil {
				m.rt.Fatalf("replica %s: log line without a time: %q", r.d.name, line)
			}
			if at.After(down.Add(backSlack)) && at.Before(up) {
				m.rt.Fatalf("replica %s logged the database back while the server was down (%s to %s): %s",
					r.d.name, down.Format(time.RFC3339Nano), up.Format(time.RFC3339Nano), line)
			}
		}
	}
}

// checkHandOvers checks, for every SIGKILL of the sequence, that each row
// the dead replica held left its lease within modelHandOverBound of the
// lease's expiry, and that a reclaimed row's floor is no later than its
// lease expiry plus what drainer knows (modelKnownHold): crash recovery in
// seconds.
func (m *seqModel) checkHandOvers(fail func(string, ...any)) {
	for _, h := range m.handOvers {
		select {
		case <-h.done:
		case <-time.After(5 * time.Minute):
			fail("hand-over after SIGKILL of pid %d: still watching after 5 minutes", h.pid)
			continue
		}
		h.mu.Lock()
		if h.disturbed != "" {
			m.tally["hand-overs disturbed"]++
			h.mu.Unlock()
			continue
		}
		for key, exp := range h.expiry {
			left, ok := h.left[key]
			switch {
			case !ok:
				fail("hand-over: row %s never left the lease of SIGKILLed pid %d (expired %s)", key, h.pid, exp.Format(time.TimeOnly))
			case m.e.ableDuring(exp, left) > modelHandOverBound:
				fail("hand-over: row %s left the lease of SIGKILLed pid %d %s after it expired, %s of it with a replica able to reclaim it; bound %s",
					key, h.pid, left.Sub(exp).Round(time.Millisecond), m.e.ableDuring(exp, left).Round(time.Millisecond), modelHandOverBound)
			case left.Sub(exp) > modelHandOverBound:
				// Every replica was SIGSTOPped or cut off Postgres for
				// long enough: nobody could reclaim it.
				m.tally["hand-overs waiting for an able replica"]++
			}
			if f := h.floor[key]; !f.IsZero() && f.Sub(exp) > modelKnownHold+modelHandOverFloorSlack && f.Sub(left) > modelKnownHold+modelHandOverFloorSlack {
				fail("hand-over: row %s reclaimed from SIGKILLed pid %d is held until %s, %s past its lease expiry; what drainer knows allows %s",
					key, h.pid, f.Format(time.TimeOnly), f.Sub(exp).Round(time.Millisecond), modelKnownHold)
			}
			m.tally["hand-overs checked"]++
		}
		h.mu.Unlock()
	}
}

// handOverSummary describes the hand-overs, for the sequence's log.
func (m *seqModel) handOverSummary() string {
	var longest time.Duration
	n := 0
	for _, h := range m.handOvers {
		h.mu.Lock()
		for key, exp := range h.expiry {
			if left, ok := h.left[key]; ok {
				longest = max(longest, left.Sub(exp))
				n++
			}
		}
		h.mu.Unlock()
	}
	return fmt.Sprintf("%d stranded rows handed over, the longest %s after its lease expired", n, longest.Round(time.Millisecond))
}

// actKillConns terminates the daemons' idle connections, the listener's and
// the wake gate's among them (their application_name starts with drainer),
// as an idle-connection killer or a network drop would: rows enqueued
// afterwards must still be woken, not left to a poll.
func (m *seqModel) actKillConns(rt *rapid.T) bool {
	var killed int
	err := withRetry(func(ctx context.Context) error {
		return m.e.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
			FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'drainer%' AND state = 'idle'
			  AND pid <> pg_backend_pid()`).Scan(&killed)
	})
	if err != nil {
		m.rt.Fatalf("kill the daemons' connections: %v", err)
	}
	m.rt.Logf("kill_conns: terminated %d idle connections of the daemons", killed)
	m.tally["conns killed"] += killed
	return killed > 0
}

// checkWakeUp: once the sequence settled (every daemon idle, asleep with
// its wake-up armed), a row committed is claimed because its notification
// woke a daemon, not by a poll, whatever the sequence did to the daemons'
// connections (kill_conns, partition), to Postgres (restarts) and to the
// daemons (SIGKILL, SIGSTOP). Each replica is probed alone, the others
// SIGSTOPped meanwhile: a replica whose wake-up went deaf would otherwise
// hide behind one that hears. Each replica counts its claimed rows by
// cause (drainer_claimed_rows_total{cause}). A poll tick can race a
// healthy notification now and then, so up to three probes are made: a
// deaf wake-up loses every one of them.
func (m *seqModel) checkWakeUp(fail func(string, ...any)) {
	for i, r := range m.e.replicas {
		for j, o := range m.e.replicas {
			if j != i {
				signalReplica(o.d, syscall.SIGSTOP)
				o.stopped = time.Now()
				m.e.noteAbility()
			}
		}
		m.wakeProbe(fail, i, r.d)
		for j, o := range m.e.replicas {
			if j != i {
				m.cont(o)
			}
		}
	}
}

// wakeProbe is checkWakeUp's probe of replica i alone.
func (m *seqModel) wakeProbe(fail func(string, ...any), i int, d *daemon) {
	e := m.e
	count := func(cause string) float64 { return m.metric(d, "drainer_claimed_rows_total", `cause="`+cause+`"`) }
	var seen []string
	for try := range 3 {
		notify, poll := count("notify"), count("poll")
		key := enqueueOne(e.t, e.pool, idemkey.Tuple{AgentRunID: fmt.Sprintf("wake-%d-%d-%d", e.seq, i, try), StepID: "probe", ToolName: toolNote}, `{"s":[]}`)
		deadline := time.Now().Add(2 * time.Minute)
		for len(e.provider.key(key).requests) == 0 {
			if time.Now().After(deadline) {
				fail("wake-up probe %s of replica %d (%s) alone: not sent within 2 minutes", key, i, d.name)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		// A row a poll claimed is counted once its notification had time
		// to come (witnessWait): wait until the probe's row is counted.
		dn, dp := count("notify")-notify, count("poll")-poll
		for until := time.Now().Add(witnessWait); dn+dp < 1 && time.Now().Before(until); {
			time.Sleep(50 * time.Millisecond)
			dn, dp = count("notify")-notify, count("poll")-poll
		}
		if dn >= 1 && dp == 0 {
			m.tally["wake-up probes"] += try + 1
			return
		}
		seen = append(seen, fmt.Sprintf("probe %d: %v rows claimed on a notification, %v by a poll", try+1, dn, dp))
	}
	fail("wake-up of replica %d (%s) deaf after the sequence: a row committed while it slept alone was not woken in three probes (%s)",
		i, d.name, strings.Join(seen, "; "))
}

// claimedRows sums the running replicas' claimed rows: all of them, and
// those claimed by a poll (drainer_claimed_rows_total{cause}).
func (m *seqModel) claimedRows() (poll, all float64) {
	for _, r := range m.e.replicas {
		for _, cause := range []string{"notify", "poll", "slots", "rearm", "signal", "retry", "start"} {
			n := m.metric(r.d, "drainer_claimed_rows_total", `cause="`+cause+`"`)
			all += n
			if cause == "poll" {
				poll += n
			}
		}
	}
	return poll, all
}

// witnessWait bounds the wait for a replica to count a row a poll claimed:
// it waits a second for the row's notification (drainer's pollWitnessWait)
// before counting it under poll.
const witnessWait = 10 * time.Second

// probeNoPoll runs probe, which enqueues rows and waits until the last
// request it expects reached the provider (it reports false, having
// failed, when none came in time), and checks that the replicas claimed
// want rows meanwhile, none of them by a poll. Another replica's poll tick
// can fall between a row coming due and the wake-up's claim now and then,
// the more often the longer that claim takes on a loaded machine (on two
// cores running three test suites, two probes in three did), so up to
// noPollProbes probes are made: a deaf wake-up loses every one of them.
func (m *seqModel) probeNoPoll(fail func(string, ...any), what string, want float64, probe func(try int) bool) {
	var seen []string
	for try := range noPollProbes {
		poll, all := m.claimedRows()
		if !probe(try) {
			return
		}
		// A row a poll claimed is counted once its notification had time
		// to come (witnessWait): wait until the rows the probe expects are
		// counted, then a moment for a claim after them.
		poll2, all2 := m.claimedRows()
		for until := time.Now().Add(witnessWait); all2-all < want && time.Now().Before(until); {
			time.Sleep(50 * time.Millisecond)
			poll2, all2 = m.claimedRows()
		}
		time.Sleep(200 * time.Millisecond)
		poll2, all2 = m.claimedRows()
		if poll2 == poll && all2-all >= want {
			m.tally[what+" probes"] = try + 1
			return
		}
		seen = append(seen, fmt.Sprintf("probe %d: %v rows claimed, %v by a poll", try+1, all2-all, poll2-poll))
	}
	fail("%s: rows waited for a poll in %d probes (%s)", what, noPollProbes, strings.Join(seen, "; "))
}

// noPollProbes is how many probes probeNoPoll makes before it fails.
const noPollProbes = 6

// waitRequests waits until key's provider saw n requests.
func (m *seqModel) waitRequests(key string, n int) bool {
	deadline := time.Now().Add(2 * time.Minute)
	for len(m.e.provider.key(key).requests) < n {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// checkOrderedScope: once the sequence settled, the rows of a tool ordered
// per business_scope (toolLedger) go out one at a time in enqueue order,
// each claimed as soon as the one before it settled: the completion wakes
// its replica's claim loop, nobody waits for a poll. Before, each row
// after a scope's first waited for a poll (a second each).
func (m *seqModel) checkOrderedScope(fail func(string, ...any)) {
	e := m.e
	m.probeNoPoll(fail, "ordered scope", 3, func(try int) bool {
		scope := fmt.Sprintf("acct-%d-%d", e.seq, try)
		keys := make([]string, 3)
		for i := range keys {
			keys[i] = enqueueOne(e.t, e.pool, idemkey.Tuple{AgentRunID: "scope-" + scope, StepID: "s" + strconv.Itoa(i),
				ToolName: toolLedger, BusinessScope: scope}, `{"s":[]}`)
		}
		if !m.waitRequests(keys[2], 1) {
			fail("ordered scope %s: its last row not sent within 2 minutes", scope)
			return false
		}
		for i := 1; i < len(keys); i++ {
			before, after := e.provider.key(keys[i-1]).requests, e.provider.key(keys[i]).requests
			if len(before) == 0 || !after[0].After(before[len(before)-1]) {
				fail("ordered scope %s: row %d sent at %v, before row %d's last request %v", scope, i, after[0], i-1, before)
				return false
			}
		}
		return true
	})
}

// checkRetryWake: once the sequence settled, a row whose first attempt
// fails (500, backoff of at most 1 s) is retried when its backoff ends,
// woken by the replica that rescheduled it, not by a poll. Before, every
// retry waited for a poll. One retry a probe: each is a chance for
// another replica's poll to come first.
func (m *seqModel) checkRetryWake(fail func(string, ...any)) {
	e := m.e
	m.probeNoPoll(fail, "retry wake-up", 2, func(try int) bool {
		key := enqueueOne(e.t, e.pool, idemkey.Tuple{AgentRunID: fmt.Sprintf("retry-%d-%d", e.seq, try), StepID: "probe",
			ToolName: toolNote}, `{"s":["500"]}`)
		if !m.waitRequests(key, 2) {
			fail("retry wake-up %s: two requests not sent within 2 minutes (%d were)", key, len(e.provider.key(key).requests))
			return false
		}
		return true
	})
}

// checkCapWake: once the sequence settled, four rows of a tool whose
// adapter allows one call at a time (toolQuota, max_concurrency 1, each
// call 300 ms) all go out, none claimed by a poll: a row the cap turns
// away waits in its worker for the slot, or, when too many wait already,
// is woken by its replica when it comes due. Before, every row the cap
// turned away waited for a poll.
func (m *seqModel) checkCapWake(fail func(string, ...any)) {
	e := m.e
	m.probeNoPoll(fail, "capped adapter", 4, func(try int) bool {
		keys := make([]string, 4)
		for i := range keys {
			keys[i] = enqueueOne(e.t, e.pool, idemkey.Tuple{AgentRunID: fmt.Sprintf("cap-%d-%d", e.seq, try), StepID: "s" + strconv.Itoa(i),
				ToolName: toolQuota}, `{"s":["`+ansSlow+`"]}`)
		}
		for _, key := range keys {
			if !m.waitRequests(key, 1) {
				fail("capped adapter %s: not sent within 2 minutes", key)
				return false
			}
		}
		return true
	})
}

// checkHeldWake: once the sequence settled, rows of a tool whose adapter's
// breaker held them back go out as soon as the provider answers again,
// none claimed by a poll. toolFlaky's adapter's breaker opens at the first
// failure: a first row answered 503 twice opens the breaker of the replica
// (or both) that sent it, and four more rows follow its refusal. A replica
// that claims one while its breaker is open defers the tool's due rows in
// bulk; they must come back when the breaker's probe is answered
// (gate.free), or, where another replica's breaker is closed, when the
// deferral ends (deferrer.wakeAllWhenDue), not by a poll. The same for
// toolFlaky's credentials: a first row answered 401 starts the auth hold
// of the replica that sent it; a row that replica's gate turns away wakes
// every replica when it comes due (retryWakes), so the replica whose
// credentials are not held takes it on that wake-up, not by its poll.
func (m *seqModel) checkHeldWake(fail func(string, ...any)) {
	e := m.e
	for _, c := range []struct {
		what, first string
		requests    int // the first row's, until it succeeds
	}{
		{"breaker", `{"s":["503","503"]}`, 3},
		{"auth hold", `{"s":["401"]}`, 2},
	} {
		m.probeNoPoll(fail, c.what, float64(c.requests+4), func(try int) bool {
			run := fmt.Sprintf("held-%d-%d-%s", e.seq, try, strings.ReplaceAll(c.what, " ", "-"))
			first := enqueueOne(e.t, e.pool, idemkey.Tuple{AgentRunID: run, StepID: "first", ToolName: toolFlaky}, c.first)
			if !m.waitRequests(first, 1) {
				fail("%s %s: first row not sent within 2 minutes", c.what, run)
				return false
			}
			keys := []string{first}
			for i := range 4 {
				keys = append(keys, enqueueOne(e.t, e.pool, idemkey.Tuple{AgentRunID: run, StepID: "s" + strconv.Itoa(i),
					ToolName: toolFlaky}, `{"s":[]}`))
			}
			for i, key := range keys {
				n := 1
				if i == 0 {
					n = c.requests
				}
				if !m.waitRequests(key, n) {
					fail("%s %s: %s not sent %d times within 2 minutes (%d were)", c.what, run, key, n, len(e.provider.key(key).requests))
					return false
				}
			}
			return true
		})
	}
}
