package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Completion is the next state of one leased row. It is written only while
// the row's lease token still matches (fencing).
type Completion struct {
	Seq   int64
	Token pgtype.UUID
	// Attempts is the row's attempt count as claimed: with Token, it lets a
	// completion written after the lease expired land on the reclaimed row,
	// as long as nobody claimed it since (see completeSQL).
	Attempts int
	// Status is the new status.
	Status string
	// GiveBack returns the attempt counted at claim: the request never
	// reached the provider.
	GiveBack bool
	// Delay schedules next_attempt_at = now() + Delay (database clock);
	// KeepNext leaves next_attempt_at as it was.
	Delay    time.Duration
	KeepNext bool
	// Floor makes now() + Delay the row's not_before as well: the earliest
	// moment the provider allows the next attempt (its Retry-After, or the
	// backoff), which no deferral, wake or reclaim may move it before.
	Floor bool
	// LastError replaces last_error; nil keeps it (cleared on success).
	LastError *string
	// Problem is the RFC 9457 problem of the answer, as JSON, or nil.
	Problem json.RawMessage
	// Response and ResponseStatus record the provider's answer.
	Response       json.RawMessage
	ResponseStatus int
	// NoRequest: no request for this row reached the provider on this
	// claim (a gate's refusal, a pause, no route, a preflight failure, a
	// release at shutdown, a request that never left). The row keeps its
	// last answer, and its audit entry records none, with Note as its
	// reason. Otherwise the completion records the answer to the request
	// sent, null when none came (a timeout, a cut connection), on the row
	// and on its audit entry.
	NoRequest bool
	Note      string
}

// Completed is what a written batch of completions did.
type Completed struct {
	// Lost lists the rows whose lease another replica now holds: nothing
	// was written for them.
	Lost []int64
	// Runs lists the runs whose saga the batch may move: a row that failed
	// (its trigger aborted the run), a compensation row that ended, or a
	// row of an aborted run that finished.
	Runs []string
}

// completeSQL writes a batch of completions in one statement, and their
// audit entries with them. Every row is fenced by its lease token: a worker
// whose lease expired and was reclaimed cannot overwrite the new owner's
// result.
//
// A completion that comes after its lease expired (its replica lost the
// database, or stalled) is still written while the reclaimed row waits
// untouched: pending or outcome_unknown, its reclaimed_lease the worker's
// token, its attempts those of the worker's claim, so nobody sent it since.
// The worker's answer is then the latest answer for the row, and it
// replaces the reclaim's conservative floor (see reclaimSQL) with the
// provider's own, or records the success. Every completion clears
// reclaimed_lease, so a row claimed again is never written by the old lease.
//
// The audit: each row whose status or attempts change gets the next entry
// of its hash chain, appended by the same statement (ins), after the head
// the row carries (audit_head; looked up once for a row that carries none
// yet), and the row's head moves to it. p is the row as the statement's
// snapshot saw it, what the entry records as "from"; a row changed by
// someone else since (its status, attempts or head differ) is not written,
// and counts as lost. The entry's answer is the provider's only for the
// completion of a request sent (drainer.answer, see Complete); the note of
// a completion without a request is its reason. Moving audit_head keeps the
// trigger for other writers (audit_change) from running.
const completeSQL = `
WITH done AS (
UPDATE {s}.queue o
   SET status = u.status,
       attempts = n.attempts,
       first_attempt_at = CASE WHEN n.attempts = 0 THEN NULL ELSE o.first_attempt_at END,
       next_attempt_at = CASE WHEN u.delay_ms < 0 THEN o.next_attempt_at
                              ELSE now() + u.delay_ms * interval '1 millisecond' END,
       not_before = CASE WHEN u.floor THEN now() + u.delay_ms * interval '1 millisecond'
                         ELSE o.not_before END,
       last_error = n.last_error,
       last_problem = CASE WHEN u.status = 'succeeded' THEN NULL
                           WHEN u.last_error IS NULL THEN o.last_problem
                           ELSE u.problem::jsonb END,
       response = CASE WHEN u.status = 'succeeded' THEN u.response::jsonb ELSE o.response END,
       response_status = n.response_status,
       cancel_cause = CASE WHEN u.status = 'cancelled' THEN 'run_aborted' ELSE o.cancel_cause END,
       lease_token = NULL,
       reclaimed_lease = NULL,
       lease_expires_at = NULL,
       leased_by = NULL,
       updated_at = now(),
       audit_head = CASE WHEN e.changed
                         THEN {s}.audit_hash(e.prev, i.key, e.at, e.event, p.status, u.status, n.attempts,
                                             e.response_status, e.actor, e.reason, e.detail)
                         ELSE p.audit_head END
  FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::int[], $5::bigint[], $6::text[], $7::text[], $8::text[], $9::int[], $10::bool[], $11::int[])
       AS u(seq, token, status, give_back, delay_ms, last_error, problem, response, response_status, floor, attempts)
  JOIN {s}.queue p ON p.seq = u.seq
  JOIN {s}.intents i ON i.seq = u.seq
 CROSS JOIN LATERAL (SELECT p.attempts - u.give_back AS attempts,
                            CASE WHEN u.status = 'succeeded' THEN NULL
                                 ELSE coalesce(u.last_error, p.last_error) END AS last_error,
                            {response_status} AS response_status) n
 CROSS JOIN LATERAL (SELECT p.status IS DISTINCT FROM u.status OR p.attempts IS DISTINCT FROM n.attempts AS changed,
                            clock_timestamp() AS at,
                            {s}.audit_event(p.status, u.status) AS event,
                            {s}.audit_actor() AS actor,
                            coalesce(p.audit_head, {s}.audit_head(i.key)) AS prev,
                            CASE WHEN current_setting('drainer.answer', true) = 'on' AND p.status = 'in_flight'
                                 THEN n.response_status END AS response_status,
                            coalesce(nullif(current_setting('drainer.reason', true), ''),
                                     CASE WHEN p.status = 'in_flight'
                                          THEN nullif(current_setting('drainer.note', true), '') END) AS reason,
                            CASE WHEN n.last_error IS DISTINCT FROM p.last_error AND n.last_error IS NOT NULL
                                 THEN sha256(convert_to(n.last_error, 'UTF8')) END AS detail) e
 WHERE o.seq = u.seq
   AND (o.lease_token = u.token
        OR (o.reclaimed_lease = u.token AND o.attempts = u.attempts
            AND o.status IN ('pending', 'outcome_unknown')))
   AND o.status = p.status AND o.attempts = p.attempts
   AND o.audit_head IS NOT DISTINCT FROM p.audit_head
RETURNING o.seq,
       CASE WHEN u.status <> 'pending'
             AND (o.kind = 'compensation' OR u.status = 'failed'
                  OR EXISTS (SELECT 1 FROM {s}.runs r WHERE r.agent_run_id = i.agent_run_id))
            THEN i.agent_run_id END AS run,
       e.changed, i.key, e.at, e.event, p.status AS from_status, o.status AS to_status, o.attempts,
       e.response_status, e.actor, e.reason, e.detail, e.prev, o.audit_head
), ins AS (
INSERT INTO {s}.audit (key, at, event, from_status, to_status, attempts, response_status,
                       actor, reason, detail_sha256, prev_hash, hash)
SELECT d.key, d.at, d.event, d.from_status, d.to_status, d.attempts, d.response_status,
       d.actor, d.reason, d.detail, d.prev, d.audit_head
  FROM done d
 WHERE d.changed
 ORDER BY d.seq
)
SELECT d.seq, d.run FROM done d`

// completeUnauditedSQL is completeSQL without the audit, for measuring
// what the audit costs (Store.WithAudit); the rows' audit_head stays.
var completeUnauditedSQL = unaudited(completeSQL)

// unaudited cuts the audit out of completeSQL: the head's assignment, the
// entry's fields, the entries.
func unaudited(q string) string {
	for _, cut := range [][2]string{
		{",\n       audit_head = CASE", "\n  FROM unnest("},
		{"\n CROSS JOIN LATERAL (SELECT p.status IS DISTINCT FROM", "\n WHERE o.seq = u.seq"},
		{",\n       e.changed", "\n), ins AS ("},
		{"\n), ins AS (", "\n)\nSELECT d.seq, d.run FROM done d"},
	} {
		from, to := strings.Index(q, cut[0]), strings.Index(q, cut[1])
		if from < 0 || to < from {
			panic("store: completeSQL changed shape; update unaudited")
		}
		q = q[:from] + q[to:]
	}
	return q
}

// Response status of a completion: the answer to the request sent, or,
// with no request, the row's last answer.
const (
	answeredStatus  = "u.response_status"
	unchangedStatus = "p.response_status"
)

// answerOn and noteFor set what the audit entries record (completeSQL, and
// audit_change in migrations/code for rows written by others):
// the entries of the requests' completions record their answers; those of
// completions without a request record none and give the note as reason.
const (
	answerOn = `SELECT set_config('drainer.answer', 'on', true), set_config('drainer.note', '', true)`
	noteFor  = `SELECT set_config('drainer.answer', '', true), set_config('drainer.note', $1, true)`
)

// completeSettings are the completion's transaction-local settings: no wait
// for the WAL flush (see Complete), and no JIT: a statement of a few hundred
// rows gains nothing from compiling, which costs tens of milliseconds once
// the cost estimate of a large batch crosses jit_above_cost.
const completeSettings = `SELECT set_config('synchronous_commit', 'off', true), set_config('jit', 'off', true)`

// Complete writes cs in one round trip and one transaction, sorted by seq
// (a stable lock order keeps concurrent batches from deadlocking): one
// statement for the completions of requests sent, one per note for those
// without a request (see NoRequest).
//
// The commit does not wait for the WAL flush: a completion lost in a
// database crash leaves its row as the (durable) claim left it, in_flight,
// so its lease expires and it is sent again with the same key, or parked on
// a non_idempotent route. No effect is duplicated, and the drain does not
// pay a disk flush per batch.
func (s *Store) Complete(ctx context.Context, db DB, cs []Completion) (Completed, error) {
	var out Completed
	slices.SortFunc(cs, func(a, b Completion) int { return int(a.Seq - b.Seq) })
	var sent []Completion
	unsent := map[string][]Completion{}
	var notes []string
	for _, c := range cs {
		if !c.NoRequest {
			sent = append(sent, c)
			continue
		}
		if _, ok := unsent[c.Note]; !ok {
			notes = append(notes, c.Note)
		}
		unsent[c.Note] = append(unsent[c.Note], c)
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(completeSettings)
	statements := 0
	if len(sent) > 0 {
		b.Queue(answerOn)
		s.queueComplete(b, sent, answeredStatus)
		statements++
	}
	for _, note := range notes {
		b.Queue(noteFor, note)
		s.queueComplete(b, unsent[note], unchangedStatus)
		statements++
	}
	b.Queue("COMMIT")
	br := db.SendBatch(ctx, b)
	defer br.Close()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return out, fmt.Errorf("complete batch: %w", err)
		}
	}
	written := make(map[int64]bool, len(cs))
	for range statements {
		if _, err := br.Exec(); err != nil {
			return Completed{}, fmt.Errorf("complete batch: audit settings: %w", err)
		}
		rows, err := br.Query()
		if err != nil {
			return Completed{}, fmt.Errorf("complete batch: %w", err)
		}
		var seq int64
		var run *string
		if _, err := pgx.ForEachRow(rows, []any{&seq, &run}, func() error {
			written[seq] = true
			if run != nil && !slices.Contains(out.Runs, *run) {
				out.Runs = append(out.Runs, *run)
			}
			return nil
		}); err != nil {
			return Completed{}, fmt.Errorf("complete batch: %w", err)
		}
	}
	if _, err := br.Exec(); err != nil {
		return Completed{}, fmt.Errorf("complete batch commit: %w", err)
	}
	if len(written) < len(cs) {
		for _, c := range cs {
			if !written[c.Seq] {
				out.Lost = append(out.Lost, c.Seq)
			}
		}
	}
	return out, nil
}

// queueComplete queues the statement writing cs (sorted by seq).
func (s *Store) queueComplete(b *pgx.Batch, cs []Completion, responseStatus string) {
	n := len(cs)
	seqs := make([]int64, n)
	tokens := make([]pgtype.UUID, n)
	statuses := make([]string, n)
	giveBack := make([]int32, n)
	delays := make([]int64, n)
	errs := make([]*string, n)
	problems := make([]*string, n)
	responses := make([]*string, n)
	codes := make([]*int32, n)
	floors := make([]bool, n)
	attempts := make([]int32, n)
	for i, c := range cs {
		seqs[i], tokens[i], statuses[i], errs[i], attempts[i] = c.Seq, c.Token, c.Status, c.LastError, int32(c.Attempts)
		floors[i] = c.Floor && !c.KeepNext
		if c.GiveBack {
			giveBack[i] = 1
		}
		delays[i] = -1
		if !c.KeepNext {
			delays[i] = c.Delay.Milliseconds()
		}
		if c.Problem != nil {
			p := string(c.Problem)
			problems[i] = &p
		}
		if c.Response != nil {
			r := string(c.Response)
			responses[i] = &r
		}
		if c.ResponseStatus > 0 {
			code := int32(c.ResponseStatus)
			codes[i] = &code
		}
	}
	stmt := completeSQL
	if s.unaudited {
		stmt = completeUnauditedSQL
	}
	b.Queue(strings.Replace(s.sql(stmt), "{response_status}", responseStatus, 1),
		seqs, tokens, statuses, giveBack, delays, errs, problems, responses, codes, floors, attempts)
}
