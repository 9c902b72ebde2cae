//go:build integration

package integration

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// waitReady waits until r answers /readyz with 200, failing the sequence
// (not the test: this runs inside rapid's check) if it exits or is still
// not ready after readyWait.
func (m *seqModel) waitReady(r *modelReplica) {
	const readyWait = 2 * time.Minute
	deadline := time.Now().Add(readyWait)
	for {
		if r.d.exited() {
			m.rt.Fatalf("replica %s exited by itself (%v)\noutput:\n%s", r.d.name, r.d.waitErr, tail(r.d.stderr.String(), 4000))
		}
		code, body := r.d.get("/readyz")
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			m.rt.Fatalf("replica %s not ready %s after the sequence: /readyz %d %s", r.d.name, readyWait, code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// metric is daemon.metric for the checks inside rapid's check: a replica
// whose /metrics does not answer fails the sequence, not the test.
func (m *seqModel) metric(d *daemon, name string, labels ...string) float64 {
	code, body := d.get("/metrics")
	if code != http.StatusOK {
		m.rt.Fatalf("%s /metrics: %d %s", d.name, code, body)
	}
	return sumMetric(body, name, labels...)
}

// settle ends the sequence's faults and pauses, commits the transactions
// still open, and waits (generously) until every row of the sequence is
// terminal or parked and every aborted run's saga is done, halted, or held
// by a parked row.
func (m *seqModel) settle() {
	e := m.e
	m.healPartitions()
	for i, r := range e.replicas {
		if !r.stopped.IsZero() {
			m.cont(r)
			m.rt.Logf("settle: SIGCONT replica %d", i)
		}
	}
	// A replica the sequence restarted (SIGKILL) may still be starting;
	// the checks after the settle probe every live replica. One that
	// exited by itself fails the sequence here (waitReady).
	for _, r := range e.replicas {
		m.waitReady(r)
	}
	for tool, paused := range m.paused {
		if paused {
			if res := e.cli("resume", tool, "--actor", "model"); res.code != 0 {
				m.rt.Fatalf("settle: resume %s: %s", tool, res)
			}
		}
	}
	for len(m.txs) > 0 {
		m.commit(m.txs[0])
	}
	bound := 3 * time.Minute
	if chaosFull() {
		bound = 10 * time.Minute
	}
	deadline := time.Now().Add(bound)
	for {
		var open, sagas int
		err := withRetry(func(ctx context.Context) error {
			return e.pool.QueryRow(ctx, `SELECT
			  (SELECT count(*) FROM drainer.outbox WHERE agent_run_id LIKE $1 AND status IN ('pending', 'in_flight')),
			  (SELECT count(*) FROM drainer.runs r WHERE r.agent_run_id LIKE $1 AND r.saga_state NOT IN ('done', 'halted')
			     AND NOT EXISTS (SELECT 1 FROM drainer.outbox o WHERE o.agent_run_id = r.agent_run_id AND o.status = 'outcome_unknown'))`,
				m.prefix+"%").Scan(&open, &sagas)
		})
		if err != nil {
			m.rt.Fatalf("settle: %v", err)
		}
		if open == 0 && sagas == 0 {
			break
		}
		if time.Now().After(deadline) {
			m.rt.Fatalf("stuck: after %v, %d rows of the sequence are pending or in_flight and %d aborted runs' sagas neither done, halted nor held by a parked row:\n%s",
				bound, open, sagas, m.dump())
		}
		time.Sleep(200 * time.Millisecond)
	}
	m.settleGateway()
}

// dump describes the sequence's rows and runs, for failure messages.
func (m *seqModel) dump() string {
	var b strings.Builder
	_ = withRetry(func(ctx context.Context) error {
		b.Reset()
		rows, err := m.e.pool.Query(ctx, `SELECT agent_run_id, step_id, tool_name, kind, key, status, attempts,
		    coalesce(last_error, ''), next_attempt_at - now() FROM drainer.outbox WHERE agent_run_id LIKE $1 ORDER BY seq`, m.prefix+"%")
		if err != nil {
			return err
		}
		for rows.Next() {
			var run, step, tool, kind, key, st, lastErr string
			var att int
			var due time.Duration
			if err := rows.Scan(&run, &step, &tool, &kind, &key, &st, &att, &lastErr, &due); err != nil {
				return err
			}
			fmt.Fprintf(&b, "  %s/%s %s %s %s %s attempts=%d due_in=%v %s\n", run, step, tool, kind, key, st, att, due, tail(lastErr, 120))
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = m.e.pool.Query(ctx, `SELECT agent_run_id, saga_state, aborted_by, abort_reason FROM drainer.runs WHERE agent_run_id LIKE $1`, m.prefix+"%")
		if err != nil {
			return err
		}
		for rows.Next() {
			var run, st, by, why string
			if err := rows.Scan(&run, &st, &by, &why); err != nil {
				return err
			}
			fmt.Fprintf(&b, "  run %s saga %s aborted by %s (%s)\n", run, st, by, why)
		}
		return rows.Err()
	})
	return b.String()
}

// lastChange is a key's last status change in the audit, and how long ago
// (on the database's clock) it was made. anchored is the status the
// audit's anchors hold for the key, read when the change itself was
// truncated (fromTruncated): what drainer still proves of it.
type lastChange struct {
	status        string
	ago           time.Duration
	fromTruncated bool
	anchored      string
	forgotten     bool // no row, no tombstone, no entry: audit_chain_forgotten
}

// auditChange is one status change read from the audit before the model
// truncated it (rotateAudit).
type auditChange struct {
	id     int64
	status string
	at     time.Time
}

// prunable are the statuses retention prunes (leaving a tombstone).
var prunable = map[string]bool{"succeeded": true, "failed": true, "cancelled": true, "compensated": true}

// lastRecorded reads the audit's last status change of each key. A key
// whose changes the model's own rotations truncated (with a retention of
// zero, below what a config accepts) takes the change read just before
// its generation was emptied, and the status its anchor holds.
func (m *seqModel) lastRecorded(keys []string) map[string]lastChange {
	out := map[string]lastChange{}
	if len(keys) == 0 {
		return out
	}
	var now time.Time
	live := map[string]auditChange{}
	anchors := map[string]string{}
	forgotten := map[string]bool{}
	err := withRetry(func(ctx context.Context) error {
		clear(live)
		clear(anchors)
		clear(forgotten)
		if err := m.e.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			return err
		}
		if err := m.readChanges(ctx, keys, live); err != nil {
			return err
		}
		rows, err := m.e.pool.Query(ctx, `SELECT k.key, coalesce(x.status, ''), drainer.audit_chain_forgotten(k.key)
		    FROM unnest($1::text[]) AS k(key) LEFT JOIN drainer.audit_anchors x ON x.key = k.key`, keys)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k, st string
			var gone bool
			if err := rows.Scan(&k, &st, &gone); err != nil {
				return err
			}
			anchors[k] = st
			if gone {
				forgotten[k] = true
			}
		}
		return rows.Err()
	})
	if err != nil {
		m.rt.Fatalf("read the audit: %v", err)
	}
	for _, k := range keys {
		c, ok := live[k]
		kept, truncated := m.truncated[k]
		if truncated && (!ok || kept.id > c.id) {
			out[k] = lastChange{kept.status, now.Sub(kept.at), true, anchors[k], forgotten[k]}
		} else if ok {
			out[k] = lastChange{status: c.status, ago: now.Sub(c.at)}
		}
	}
	return out
}

// readChanges reads the last status change of each key the audit holds now
// into into (the newest by id wins over what into held).
func (m *seqModel) readChanges(ctx context.Context, keys []string, into map[string]auditChange) error {
	rows, err := m.e.pool.Query(ctx, `SELECT DISTINCT ON (key) key, id, to_status, at
		FROM drainer.audit WHERE key = ANY($1) AND to_status IS NOT NULL ORDER BY key, id DESC`, keys)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var c auditChange
		if err := rows.Scan(&k, &c.id, &c.status, &c.at); err != nil {
			return err
		}
		if old, ok := into[k]; !ok || c.id > old.id {
			into[k] = c
		}
	}
	return rows.Err()
}

// runState is a run's record at the end of a sequence.
type runState struct{ saga, by string }

// verify checks the model's invariants once the sequence settled.
func (m *seqModel) verify() {
	e := m.e
	var fails []string
	fail := func(format string, args ...any) { fails = append(fails, fmt.Sprintf(format, args...)) }

	var committed []*mIntent
	var keys []string
	for _, in := range m.intents {
		if in.committed {
			committed = append(committed, in)
			keys = append(keys, in.key)
		}
	}
	status := m.statuses(keys)
	var unknown []string
	for _, k := range keys {
		if _, ok := status[k]; !ok {
			unknown = append(unknown, k)
		}
	}
	forgotten := m.lastRecorded(unknown)
	runs := map[string]runState{}
	if err := withRetry(func(ctx context.Context) error {
		rows, err := e.pool.Query(ctx, `SELECT agent_run_id, saga_state, aborted_by FROM drainer.runs WHERE agent_run_id LIKE $1`, m.prefix+"%")
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var s runState
			if err := rows.Scan(&id, &s.saga, &s.by); err != nil {
				return err
			}
			runs[id] = s
		}
		return rows.Err()
	}); err != nil {
		m.rt.Fatalf("read runs: %v", err)
	}

	// Rows: their outcome against what the provider saw.
	for _, in := range committed {
		st, known := status[in.key]
		pv := e.provider.key(in.key)
		name := fmt.Sprintf("%s/%s %s (key %s, script %v)", in.run.id, in.step, in.tool, in.key, in.script)
		if e.tampered[in.key] == tamperRow {
			continue // its row is gone by the tamperer's hand (model_tamper_test.go)
		}
		if !known {
			// Forgotten is allowed only as retention forgets: the audit
			// (kept an hour) shows the row settled in a status retention
			// prunes, longer ago than the tombstones are kept. Its status
			// is then the audit's last, or, once the model's rotations
			// truncated that, its anchor's, until its chain is forgotten
			// too (no row, no tombstone, no entry: both retentions past,
			// the model's audit one being zero), when the anchor may go
			// (the sweep after a truncation; checkRetired bounds when).
			last, ok := forgotten[in.key]
			if !ok || !prunable[last.status] || last.ago < modelTombstones {
				fail("%s: drainer.result knows nothing of it (the row and its tombstone are gone), and the audit does not show it settled more than the tombstones' %v ago (last recorded: %+v)",
					name, modelTombstones, last)
				continue
			}
			retired := last.anchored == "" && last.forgotten
			if _, tampered := e.tampered[in.key]; last.fromTruncated && !tampered && !retired && last.anchored != last.status {
				fail("%s: forgotten, its audit truncated after it settled %s, and its anchor holds status %q: what drainer keeps no longer proves how it ended",
					name, last.status, last.anchored)
			}
			switch {
			case last.fromTruncated && retired:
				m.tally["forgotten, anchor retired"]++
			case last.fromTruncated:
				m.tally["forgotten after audit truncation"]++
			}
			m.rt.Logf("%s: forgotten by retention (%s %v ago, audit truncated %v)", name, last.status, last.ago.Round(time.Millisecond), last.fromTruncated)
			st = last.status
		}
		// A key forgotten by retention and enqueued again is a new intent:
		// the provider may apply it once more.
		if pv.effects > 1 && !in.recreated {
			fail("%s: %d effects at the provider (status %s)", name, pv.effects, st)
		}
		if e.tampered[in.key] == tamperStatus {
			continue // its status is the tamperer's (model_tamper_test.go)
		}
		switch st {
		case "pending", "in_flight":
			fail("%s: still %s after the settle", name, st)
		case "succeeded", "compensated":
			if pv.effects != 1 && !(in.recreated && pv.effects > 1) {
				fail("%s: %s with %d effects at the provider", name, st, pv.effects)
			}
		case "cancelled":
			if pv.effects > 0 && !in.opCancelled && !in.recreated {
				fail("%s: cancelled although the provider applied its effect (%d requests)", name, len(pv.requests))
			}
		case "failed":
			// An effect whose answer was lost (cut by the script, or by a
			// replica killed or stopped, or Postgres restarted) may be
			// followed by the key-TTL guard or exhausted attempts: the
			// daemon cannot know the effect happened.
			lost := m.faulted || slices.ContainsFunc(in.script, func(a string) bool { return a == ansDrop || a == ansLate })
			if pv.effects > 0 && !lost {
				fail("%s: failed although the provider applied its effect", name)
			}
		case "outcome_unknown":
			if in.tool != toolSMS {
				fail("%s: outcome_unknown on a key_idempotent route", name)
			}
		default:
			fail("%s: status %s", name, st)
		}
		if in.abortSeen {
			how := "its RR/SER snapshot or statement predates the abort; the commit does not"
			if in.abortBeforeStmt {
				how = "the abort committed before the enqueue statement ran"
			}
			sent := len(pv.requests)
			if in.recreated { // the requests of its earlier row do not count
				sent = 0
				for _, at := range pv.requests {
					if at.After(in.recreatedAt) {
						sent++
					}
				}
			}
			if st != "cancelled" || sent > 0 {
				fail("%s: enqueued into an aborted run (%s) but ended %s after %d requests (want cancelled, never sent)",
					name, how, st, sent)
			}
		}
		if first, ok := windowStart(pv.requests, in.script); in.tool != toolSMS && !in.recreated && ok {
			for _, at := range pv.requests {
				if at.Sub(first) > modelSendWindow+1500*time.Millisecond && !e.zombie(at) {
					fail("%s: request %v after the first, past key_ttl - 1m (%v)", name, at.Sub(first).Round(time.Millisecond), modelSendWindow)
					break
				}
			}
		}
	}

	// Runs: aborts remembered, sagas complete and in order.
	for _, r := range m.runs {
		rs, aborted := runs[r.id]
		if !r.abortedAt.IsZero() && !aborted && time.Since(r.abortedAt) < modelTombstones {
			fail("run %s: aborted by the agent or an operator at %s, but no longer aborted (revived)", r.id, r.abortedAt.Format("15:04:05.000"))
		}
		comps := e.provider.compensations(r.id)
		if !r.forgottenAt.IsZero() {
			// The run id names a new run since its abort was forgotten: the
			// earlier run's compensations were judged with it.
			comps = slices.DeleteFunc(comps, func(c compEffect) bool { return c.at.Before(r.forgottenAt) })
		}
		var fwd []*mIntent
		for _, in := range committed {
			if in.run == r {
				fwd = append(fwd, in)
			}
		}
		if !aborted {
			// Retention forgets a run whose saga is done once its rows and
			// their tombstones are gone: no sooner than the tombstones'
			// window after its last compensation. A long sequence may then
			// enqueue into the run id again, a run nobody aborted.
			if len(comps) > 0 && time.Since(comps[len(comps)-1].at) < modelTombstones {
				fail("run %s: not aborted, yet %d compensations were applied (the last %v ago)", r.id, len(comps),
					time.Since(comps[len(comps)-1].at).Round(time.Millisecond))
			} else if len(comps) > 0 {
				m.rt.Logf("run %s: its abort forgotten by retention (%d compensations, the last %v ago)", r.id, len(comps),
					time.Since(comps[len(comps)-1].at).Round(time.Millisecond))
			}
			continue
		}
		held := false
		for _, in := range fwd {
			held = held || status[in.key] == "outcome_unknown"
		}
		seen := map[string]int{}
		last := -1
		for _, c := range comps {
			seen[c.forwardKey]++
			in := m.intentByKey(c.forwardKey)
			switch {
			case in == nil || in.run != r || in.tool != toolCharge:
				fail("run %s: compensation applied for %s, which is no compensable step of the run", r.id, c.forwardKey)
			case e.provider.key(in.key).effects == 0:
				fail("run %s: compensation applied for %s, whose effect never happened", r.id, c.forwardKey)
			case last >= 0 && in.orderAt(c.at) > last:
				// (the order of the key's row when the compensation was
				// applied: a key created again has a later one since)
				fail("run %s: compensation of %s (created #%d) applied after one of a row created earlier (#%d): not reverse seq order", r.id, in.step, in.orderAt(c.at), last)
			}
			if in != nil {
				last = in.orderAt(c.at)
			}
		}
		for k, n := range seen {
			if in := m.intentByKey(k); n > 1 && (in == nil || !in.recreated) {
				fail("run %s: compensation of %s applied %d times", r.id, k, n)
			}
		}
		if rs.saga != "halted" && !held {
			for _, in := range fwd {
				st := status[in.key]
				if in.tool == toolCharge && (st == "succeeded" || st == "compensated") && e.provider.key(in.key).effects == 1 {
					if st != "compensated" || seen[in.key] != 1 && !(seen[in.key] == 0 && in.humanUndone) {
						fail("run %s (saga %s, aborted by %s): step %s succeeded with its effect, ends %s with %d compensations applied (want compensated, once)",
							r.id, rs.saga, rs.by, in.step, st, seen[in.key])
					}
				}
			}
		}
		m.checkParkedHold(r, fwd, comps, fail)
	}

	// Retry-After floors, bad requests, the audit chain.
	floors := e.provider.floorViolations()
	for _, v := range floors[e.floorsSeen:] {
		if !e.zombie(v.at) {
			fail("key %s: request %v before its Retry-After floor (given at %s)", v.key, v.floor.Sub(v.at).Round(time.Millisecond), v.givenAt.Format("15:04:05.000"))
		}
	}
	e.floorsSeen = len(floors)
	if bad := e.provider.badRequests(); len(bad) > 0 {
		fail("provider answered %d malformed requests: %v", len(bad), bad)
	}
	// Every row carries its payload's size (queue.payload_bytes), whoever
	// wrote it (enqueue, batch, saga, gateway, rotation): a claim bounded
	// by max_in_flight_bytes would read the intents of a row without.
	var unsized []string
	if err := withRetry(func(ctx context.Context) error {
		rows, err := e.pool.Query(ctx, `SELECT i.key FROM drainer.queue q JOIN drainer.intents i ON i.seq = q.seq
		     WHERE i.agent_run_id LIKE $1
		       AND NOT abs(q.payload_bytes - pg_column_size(i.payload::text::jsonb)) <= 3`, m.prefix+"%") // 3: a stored short varlena header
		if err != nil {
			return err
		}
		unsized, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}); err != nil {
		m.rt.Fatalf("payload sizes: %v", err)
	}
	for _, k := range unsized {
		fail("%s: queue.payload_bytes is not its payload's size", k)
	}
	m.waitWakeBound() // the probes of the wake-ups, the gateway's among them, after their bound
	m.checkGateway(fail)
	m.checkUnrouted(fail)
	m.checkRefusals(fail)
	m.checkTampering(fail)
	m.checkHandOvers(fail)
	m.checkWakeUp(fail)
	m.checkOrderedScope(fail)
	m.checkRetryWake(fail)
	m.checkCapWake(fail)
	m.checkHeldWake(fail)
	if len(fails) > 0 {
		m.rt.Fatalf("%d invariant violations:\n  %s\nrows and runs:\n%s", len(fails), strings.Join(fails, "\n  "), m.dump())
	}
	byStatus := map[string]int{}
	for _, st := range status {
		byStatus[st]++
	}
	// how often the replicas' max_in_flight_bytes held due rows back (the
	// replicas running now, since their start)
	withheld := 0.0
	for _, r := range e.replicas {
		if r.stopped.IsZero() {
			if code, body := r.d.get("/metrics"); code == http.StatusOK {
				withheld += sumMetric(body, "drainer_claim_withheld_rows_total")
			}
		}
	}
	e.t.Logf("sequence %s: %d rows %v, %d runs (%d aborted), steps %v, %s, %v rows withheld for their bytes: invariants hold",
		m.prefix, len(committed), byStatus, len(m.runs), len(runs), m.tally, m.handOverSummary(), withheld)
}

// checkParkedHold fails when a compensation of run r was applied while a
// forward row of r was parked outcome_unknown (its audit entries say when).
func (m *seqModel) checkParkedHold(r *mRun, fwd []*mIntent, comps []compEffect, fail func(string, ...any)) {
	if len(comps) == 0 {
		return
	}
	var keys []string
	for _, in := range fwd {
		if in.tool == toolSMS {
			keys = append(keys, in.key)
		}
	}
	if len(keys) == 0 {
		return
	}
	type span struct {
		key      string
		from, to time.Time
	}
	var spans []span
	err := withRetry(func(ctx context.Context) error {
		spans = nil
		rows, err := m.e.pool.Query(ctx, `SELECT key, at, from_status, to_status FROM drainer.audit WHERE key = ANY($1) ORDER BY key, id`, keys)
		if err != nil {
			return err
		}
		type entry struct {
			key      string
			at       time.Time
			from, to *string
		}
		es, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (entry, error) {
			var x entry
			err := row.Scan(&x.key, &x.at, &x.from, &x.to)
			return x, err
		})
		if err != nil {
			return err
		}
		for _, x := range es {
			if x.to != nil && *x.to == "outcome_unknown" {
				spans = append(spans, span{key: x.key, from: x.at})
			}
			if x.from != nil && *x.from == "outcome_unknown" && (x.to == nil || *x.to != "outcome_unknown") {
				for i := range spans {
					if spans[i].key == x.key && spans[i].to.IsZero() {
						spans[i].to = x.at
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		m.rt.Fatalf("read audit: %v", err)
	}
	const slack = 300 * time.Millisecond
	for _, c := range comps {
		for _, s := range spans {
			if c.at.After(s.from.Add(slack)) && (s.to.IsZero() || c.at.Before(s.to.Add(-slack))) {
				fail("run %s: compensation of %s applied at %s while step %s was parked outcome_unknown (since %s)",
					r.id, c.forwardKey, c.at.Format("15:04:05.000"), s.key, s.from.Format("15:04:05.000"))
			}
		}
	}
}

// zombie reports whether a request at t may come from a replica resumed
// after a SIGSTOP (prepared before the stop; see seqModel.cont).
func (e *modelEnv) zombie(t time.Time) bool {
	for _, w := range e.zombies {
		if !t.Before(w.from) && !t.After(w.to) {
			return true
		}
	}
	return false
}

// windowStart is when a key's window opened at the provider: its first
// request not refused with 401. A 401 refuses the credentials before
// anything is done; drainer gives that attempt back and, when it opened
// the key's window (no request before it), closes the window with it.
// Dedupe answers (a stored or in-flight key) come only after a request
// that was not a 401. ok is false when every request was a 401.
func windowStart(requests []time.Time, script []string) (time.Time, bool) {
	for i, at := range requests {
		if i >= len(script) || script[i] != ans401 {
			return at, true
		}
	}
	return time.Time{}, false
}
