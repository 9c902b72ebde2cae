//go:build integration

package integration

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/drainer-io/drainer/dispatch/pgtable"
	"github.com/drainer-io/drainer/idemkey"
	"github.com/jackc/pgx/v5"
	"pgregory.net/rapid"
)

// Two more parts of the model's alphabet: producers that name tools no
// route takes, and a provider that refuses (docs/reliability.md, "The
// model-checked random test").
//
// Unrouted rows (actUnrouted) are neither sent nor failed, whatever else
// the sequence does to the daemons; they stay in the queue across
// sequences, so later sequences run with a growing backlog of them under
// faults, rotations and retention.
//
// The refusing provider is a recipient table (the postgres adapter) whose
// trigger rolls back the insert of a row whose payload asks it to, with
// the SQLSTATE the payload names: a refusal the provider answered, which
// consumes an attempt (docs/reference.md §2, Attempts). A run of the tool
// hold (compensated by release, also refused when its forward payload
// asks) must settle within the settle's bound however it is refused: a
// refused row ends failed at max_attempts, a refused compensation
// compensation_failed, never retried for ever.

const (
	toolHold    = "hold"
	toolRelease = "release"
	// modelRecvTable is the refusing provider's recipient table, in the
	// model's own database.
	modelRecvTable = "model_recv"
	// modelRefusalAttempts is hold's and release's max_attempts.
	modelRefusalAttempts = 3
)

// refusalCodes are the SQLSTATEs the recipient table's trigger raises: an
// overloaded server and a serialization failure (retryable refusals: each
// consumes an attempt), and a plain exception (terminal).
var refusalCodes = []string{"", "", "53300", "40001", "P0001"}

// modelRecvDDL creates the recipient table and its refusing trigger.
func modelRecvDDL() string {
	return fmt.Sprintf(pgtable.RecipientTableDDL, modelRecvTable) + `;
CREATE FUNCTION model_recv_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  code text := CASE WHEN NEW.tool_name = 'release' THEN NEW.payload->'forward_payload'->>'rrf' ELSE NEW.payload->>'rf' END;
BEGIN
  IF coalesce(code, '') <> '' THEN
    RAISE EXCEPTION 'model: the provider refuses % (%)', NEW.tool_name, code USING ERRCODE = code;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER model_recv_refuse BEFORE INSERT ON ` + modelRecvTable + ` FOR EACH ROW EXECUTE FUNCTION model_recv_refuse()`
}

// modelRecvConfig is the adapter and routes of the refusing provider, for
// modelConfig.
func modelRecvConfig(dbURL string) (adapter, routes string) {
	adapter = fmt.Sprintf("  recv:\n    type: postgres\n    dsn: %s\n    table: %s\n    timeout: 1s\n", dbURL, modelRecvTable)
	r := "{adapter: recv, class: key_idempotent, max_attempts: " + strconv.Itoa(modelRefusalAttempts) + ", backoff: {base: 100ms, cap: 300ms}%s}"
	routes = "  " + toolHold + ": " + fmt.Sprintf(r, ", compensation: "+toolRelease) + "\n" +
		"  " + toolRelease + ": " + fmt.Sprintf(r, "") + "\n"
	return adapter, routes
}

// mUnrouted is a row whose tool no route takes.
type mUnrouted struct {
	key, tool string
	cancelled bool // an operator cancelled it
}

// mRefusal is a run of one hold step sent to the refusing provider.
type mRefusal struct {
	run          string
	key          string
	rf, rrf      string // SQLSTATE refusing hold, release ("" none)
	aborted      bool
	abortedAfter bool      // the abort came after the row committed, in a later step
	at           time.Time // when hold was enqueued
}

// actUnrouted enqueues rows whose tools have no route (a batch of up to 300
// in one transaction, each its own invented tool or a few shared), or an
// operator cancels one of them.
func (m *seqModel) actUnrouted(rt *rapid.T) bool {
	if len(m.unrouted) > 0 && rapid.IntRange(0, 3).Draw(rt, "unrouted_cancel") == 0 {
		u := m.unrouted[rapid.IntRange(0, len(m.unrouted)-1).Draw(rt, "unrouted_row")]
		res := m.e.cli("cancel", u.key, "--actor", "model", "--reason", "model: invented tool")
		if res.code == 2 {
			m.rt.Fatalf("cancel %s: usage error: %s", u.key, res)
		}
		u.cancelled = u.cancelled || res.code == 0
		m.rt.Logf("unrouted: cancel %s: exit %d", u.key, res.code)
		return true
	}
	n := rapid.IntRange(1, 300).Draw(rt, "unrouted_rows")
	names := rapid.IntRange(1, n).Draw(rt, "unrouted_tools")
	iso := rapid.SampledFrom(isoLevels).Draw(rt, "iso")
	base := len(m.unrouted)
	var rows []*mUnrouted
	err := withRetry(func(ctx context.Context) error {
		rows = nil
		return pgx.BeginTxFunc(ctx, m.e.pool, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
			runs, steps, tools, payloads := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
			for i := range n {
				runs[i] = fmt.Sprintf("u%d-run%d", m.e.seq, (base+i)/50)
				steps[i] = "s" + strconv.Itoa(base+i)
				tools[i] = fmt.Sprintf("invented_%d_%d", m.e.seq, (base+i)%names)
				payloads[i] = `{"n": ` + strconv.Itoa(i) + `}`
			}
			r, err := tx.Query(ctx, `SELECT e.key FROM drainer.enqueue_batch($1::text[], $2::text[], $3::text[],
			    array_fill(''::text, ARRAY[$5::int]), $4::jsonb[]) e`, runs, steps, tools, payloads, n)
			if err != nil {
				return err
			}
			keys, err := pgx.CollectRows(r, pgx.RowTo[string])
			if err != nil {
				return err
			}
			if len(keys) != n {
				return fmt.Errorf("enqueue_batch of %d rows returned %d keys", n, len(keys))
			}
			for i, k := range keys {
				rows = append(rows, &mUnrouted{key: k, tool: tools[i]})
			}
			return nil
		})
	})
	if s := sqlState(err); s == "40001" || s == "40P01" || s == "55P03" {
		m.rt.Logf("unrouted: %d rows not enqueued: %v", n, err)
		return true
	}
	if err != nil {
		m.rt.Fatalf("unrouted: enqueue %d rows: %v", n, err)
	}
	m.unrouted = append(m.unrouted, rows...)
	m.rt.Logf("unrouted: %d rows enqueued under %d invented tools (%s)", n, names, isoName(iso))
	return true
}

// actRefusal starts a run of one hold step whose provider may refuse it
// (and its compensation), or aborts such a run.
func (m *seqModel) actRefusal(rt *rapid.T) bool {
	var open []*mRefusal
	for _, r := range m.refusals {
		if !r.aborted {
			open = append(open, r)
		}
	}
	if len(open) > 0 && rapid.IntRange(0, 2).Draw(rt, "refusal_abort") == 0 {
		r := open[rapid.IntRange(0, len(open)-1).Draw(rt, "refusal_run")]
		m.abortRefusal(r)
		r.abortedAfter = r.aborted
		return true
	}
	r := &mRefusal{
		run: fmt.Sprintf("%sref%d", m.prefix, len(m.refusals)),
		rf:  rapid.SampledFrom(refusalCodes).Draw(rt, "refuse_hold"),
		rrf: rapid.SampledFrom(refusalCodes).Draw(rt, "refuse_release"),
	}
	payload := fmt.Sprintf(`{"rf": %q, "rrf": %q}`, r.rf, r.rrf)
	err := withRetry(func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, m.e.pool, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT key FROM drainer.enqueue($1, 'hold', $2, '', $3::jsonb)`, r.run, toolHold, payload).Scan(&r.key)
		})
	})
	if err != nil {
		m.rt.Fatalf("refusal: enqueue %s: %v", r.run, err)
	}
	r.at = time.Now()
	m.refusals = append(m.refusals, r)
	if rapid.IntRange(0, 3).Draw(rt, "refusal_abort_now") == 0 {
		m.abortRefusal(r)
	}
	m.rt.Logf("refusal: run %s, hold refused %q, release refused %q, aborted %v", r.run, r.rf, r.rrf, r.aborted)
	return true
}

func (m *seqModel) abortRefusal(r *mRefusal) {
	var n int
	err := withRetry(func(ctx context.Context) error {
		return m.e.pool.QueryRow(ctx, "SELECT drainer.abort_run($1, 'model: abort of a refused run')", r.run).Scan(&n)
	})
	if s := sqlState(err); s == "55P03" || s == "40001" || s == "40P01" {
		m.rt.Logf("refusal: abort %s: %v", r.run, err)
		return
	}
	if err != nil {
		m.rt.Fatalf("refusal: abort %s: %v", r.run, err)
	}
	r.aborted = true
}

// recvRow is what the model reads of a key once the sequence settled.
type recvRow struct {
	status   string
	attempts int  // -1: the row and the audit's record of it are gone
	received bool // the recipient table holds the key
}

// readRecv reads each key's status (drainer.result, so a pruned row
// answers from its tombstone; once that expired too, the audit's last
// status change), its attempts (the row's, else the audit's), and whether
// the recipient table holds it.
func (m *seqModel) readRecv(keys []string) map[string]recvRow {
	out := map[string]recvRow{}
	err := withRetry(func(ctx context.Context) error {
		clear(out)
		rows, err := m.e.pool.Query(ctx, `SELECT k, coalesce(r.status,
		        (SELECT a.to_status FROM drainer.audit a WHERE a.key = k AND a.to_status IS NOT NULL ORDER BY a.id DESC LIMIT 1)),
		    coalesce((SELECT o.attempts FROM drainer.outbox o WHERE o.key = k),
		             (SELECT a.attempts FROM drainer.audit a WHERE a.key = k AND a.to_status IS NOT NULL ORDER BY a.id DESC LIMIT 1), -1),
		    EXISTS (SELECT 1 FROM `+modelRecvTable+` t WHERE t.key = k)
		  FROM unnest($1::text[]) k LEFT JOIN LATERAL drainer.result(k) r ON true`, keys)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			var st *string
			var v recvRow
			if err := rows.Scan(&k, &st, &v.attempts, &v.received); err != nil {
				return err
			}
			if st != nil {
				v.status = *st
			}
			out[k] = v
		}
		return rows.Err()
	})
	if err != nil {
		m.rt.Fatalf("read the refused rows: %v", err)
	}
	return out
}

// checkUnrouted: every row whose tool has no route, of this sequence and
// of every earlier one, is still pending with no attempt consumed and was
// never sent, unless an operator cancelled it (then cancelled, unsent).
func (m *seqModel) checkUnrouted(fail func(string, ...any)) {
	e := m.e
	e.unrouted = append(e.unrouted, m.unrouted...)
	m.unrouted = nil
	if len(e.unrouted) == 0 {
		return
	}
	keys := make([]string, len(e.unrouted))
	for i, u := range e.unrouted {
		keys[i] = u.key
	}
	// A claim takes an unrouted row in flight (its attempt counted) for
	// the moment it takes to give it back: such a row is read again,
	// until it has stayed in flight past its lease and a reclaim.
	var got map[string]recvRow
	for deadline := time.Now().Add(modelLease + modelHandOverBound); ; time.Sleep(200 * time.Millisecond) {
		got = m.readRecv(keys)
		if !slices.ContainsFunc(keys, func(k string) bool { return got[k].status == "in_flight" }) || time.Now().After(deadline) {
			break
		}
	}
	bad := 0
	for _, u := range e.unrouted {
		r := got[u.key]
		want := "pending"
		if u.cancelled {
			want = "cancelled"
		}
		sent := len(e.provider.key(u.key).requests) > 0 || r.received
		if (r.status != want && !(u.cancelled && r.status == "")) || r.attempts > 0 || sent {
			if bad++; bad <= 10 {
				fail("unrouted row %s (tool %s): %s with %d attempts, sent %v (want %s, no attempt, never sent; in flight only for a moment)",
					u.key, u.tool, r.status, r.attempts, sent, want)
			}
		}
	}
	if bad > 10 {
		fail("%d more unrouted rows not pending", bad-10)
	}
	m.tally["unrouted rows held"] = len(e.unrouted)
}

// checkRefusals: each refused run settled as its provider's answers say,
// its refusals consuming attempts (a retryable refusal fails the row only
// at max_attempts) and no row sent twice.
func (m *seqModel) checkRefusals(fail func(string, ...any)) {
	if len(m.refusals) == 0 {
		return
	}
	var keys []string
	for _, r := range m.refusals {
		keys = append(keys, r.key, releaseKey(r.run))
	}
	got := m.readRecv(keys)
	for _, r := range m.refusals {
		h := got[r.key]
		name := fmt.Sprintf("run %s (hold refused %q, release refused %q, aborted %v)", r.run, r.rf, r.rrf, r.aborted)
		if h.status == "" {
			// Neither row, tombstone nor audit entry: retention forgets a
			// key no sooner than the tombstones' window after it settled.
			if time.Since(r.at) < modelTombstones {
				fail("%s: drainer knows nothing of hold %s, enqueued %v ago", name, r.key, time.Since(r.at).Round(time.Millisecond))
			} else {
				m.rt.Logf("%s: forgotten by retention", name)
			}
			continue
		}
		if h.received && r.rf != "" {
			fail("%s: the recipient table holds hold's key although every insert of it was refused", name)
		}
		switch h.status {
		case "succeeded", "compensated":
			if !h.received {
				fail("%s: hold %s but the recipient table does not hold it", name, h.status)
			}
		case "failed":
			checkRefusedAttempts(fail, name+": hold", r.rf, h.attempts)
		case "cancelled":
			if !r.aborted || h.received {
				fail("%s: hold cancelled (received %v) without an abort before it was sent", name, h.received)
			}
		default:
			fail("%s: hold ends %q", name, h.status)
		}
		c := got[releaseKey(r.run)]
		if !r.aborted || h.status == "cancelled" || h.status == "failed" {
			if h.status == "compensated" || c.status != "" {
				fail("%s: hold %s and a compensation row %s (received %v), without an abort after hold succeeded", name, h.status, c.status, c.received)
			}
			continue
		}
		// Aborted after hold succeeded: its compensation ran.
		switch {
		case c.status == "" && h.status == "compensated" && time.Since(r.at) >= modelTombstones:
			m.rt.Logf("%s: release forgotten by retention", name)
		case c.status == "":
			fail("%s: hold %s in an aborted run, and no release row", name, h.status)
		case r.rrf == "" && (h.status != "compensated" || c.status != "succeeded" || !c.received):
			fail("%s: release not refused, yet hold %s and release %s (received %v)", name, h.status, c.status, c.received)
		case r.rrf != "" && c.received:
			fail("%s: the recipient table holds release's key although every insert of it was refused", name)
		case r.rrf != "" && c.status == "cancelled" && h.status == "compensated":
			// an operator resolved the compensation_failed row (actOperator)
		case r.rrf != "" && (c.status != "compensation_failed" || h.status != "succeeded"):
			fail("%s: release refused, yet release %s and hold %s (want compensation_failed and succeeded)", name, c.status, h.status)
		case r.rrf != "":
			checkRefusedAttempts(fail, name+": release", r.rrf, c.attempts)
		}
	}
	m.tally["refused runs"] = len(m.refusals)
}

// checkRefusedAttempts: a row refused with code ended after consuming its
// attempts: all of them for a retryable refusal, at least one for a
// terminal one (attempts -1: its record is gone).
func checkRefusedAttempts(fail func(string, ...any), name, code string, attempts int) {
	switch {
	case code == "":
		fail("%s: ended failed although its provider never refused it", name)
	case attempts < 0:
	case code == "P0001" && (attempts < 1 || attempts > modelRefusalAttempts):
		fail("%s: refused terminally (%s) after %d attempts (want 1 to %d)", name, code, attempts, modelRefusalAttempts)
	case code != "P0001" && attempts != modelRefusalAttempts:
		fail("%s: refused (%s) every time, ended after %d attempts (want max_attempts %d: a refusal consumes one)", name, code, attempts, modelRefusalAttempts)
	}
}

// releaseKey returns the key of run's compensation row: its tuple is the
// run, the forward row's step, the compensation's tool and scope
// (docs/reference.md §6).
func releaseKey(run string) string {
	return idemkey.Tuple{AgentRunID: run, StepID: "hold", ToolName: toolRelease}.Key()
}
