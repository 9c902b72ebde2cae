package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/drainer-io/drainer/outbox"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	// Gen is the generation the row was claimed in (ClaimedRow.Gen), where
	// the completion looks for it first; a row found elsewhere (moved since,
	// or Gen unknown) costs a second look-up by seq alone (complete_rows).
	Gen int16
	// Status is the new status.
	Status outbox.Status
	// GiveBack returns the attempt counted at claim: the request never
	// reached the provider.
	GiveBack bool
	// Uncounted: the claim counted no attempt (ClaimedRow.Counted false),
	// so GiveBack has nothing to give back.
	Uncounted bool
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
	// and on its audit entry, and Note, when set, is that entry's reason
	// (why an attempt sent did not succeed: "sent: timeout").
	NoRequest bool
	Note      string
	// Tool and RetryAfter: the provider's Retry-After on this answer (capped
	// at the route's max_retry_after; 0: none), recorded as its tool's mark
	// in the same transaction, which holds reclaimed rows of the tool
	// (see reclaimSQL).
	Tool       string
	RetryAfter time.Duration
	// Announce: the row settles (terminal or parked) and someone may wait
	// for it (the MCP gateway): once written, its key is announced on the
	// settle channel (SettleChannel) and its Record, when it has one, kept
	// in call_records, both in the completion's transaction.
	Announce bool
	// Record is the provider's whole answer (dispatch.Result.Record).
	Record json.RawMessage
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

// completeSQL writes a batch of completions and their audit entries in
// one statement: complete_rows (migrations/code/functions/complete_rows.sql
// says how each row is fenced and audited), with the owner's rights, the
// only way the daemon's role appends audit entries. $12: the completions
// answer requests sent.
const completeSQL = `SELECT seq, run FROM {s}.complete_rows($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`

// answerOn and noteFor set what the audit entries record (complete_rows,
// and audit_change for rows written by others, in migrations/code):
// the entries of the requests' completions record their answers; those of
// completions without a request record none. Either gives the note, when
// there is one, as its entries' reason.
const (
	answerOn = `SELECT set_config('drainer.answer', 'on', true), set_config('drainer.note', $1, true)`
	noteFor  = `SELECT set_config('drainer.answer', '', true), set_config('drainer.note', $1, true)`
)

// completeSettings are the completion's transaction-local settings: no wait
// for the WAL flush (see Complete), no JIT (a statement of a few hundred
// rows gains nothing from compiling, which costs tens of milliseconds once
// the cost estimate of a large batch crosses jit_above_cost), and a bound
// on each lock wait ($1): a completion waits on locks only briefly, unless
// another transaction holds one for long (a run's abort in a transaction
// left open: the trigger of a row of that run ending failed aborts the run
// too, and waits for the first abort's transaction to end), and a batch
// must not wait with it (see IsLockWait).
const completeSettings = `SELECT set_config('synchronous_commit', 'off', true), set_config('jit', 'off', true), set_config('lock_timeout', $1, true)`

// CompleteLockWait is how long Complete lets a batch wait for a lock.
const CompleteLockWait = 2 * time.Second

// IsLockWait reports whether err is a completion's lock wait given up
// (SQLSTATE 55P03, lock_timeout): another transaction holds a lock one of
// its rows needs. The batch was rolled back whole.
func IsLockWait(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}

// Complete writes cs in one round trip and one transaction, sorted by seq
// (a stable lock order keeps concurrent batches from deadlocking): one
// statement per note for the completions of requests sent (most have none),
// and one per note for those without a request (see NoRequest).
//
// The commit does not wait for the WAL flush: a completion lost in a
// database crash leaves its row as the (durable) claim left it, in_flight,
// so its lease expires and it is sent again with the same key, or parked on
// a non_idempotent route. No effect is duplicated, and the drain does not
// pay a disk flush per batch.
func (s *Store) Complete(ctx context.Context, db DB, cs []Completion) (Completed, error) {
	return s.CompleteWithin(ctx, db, cs, CompleteLockWait)
}

// CompleteWithin is Complete with each lock wait bounded by lockWait
// (IsLockWait).
func (s *Store) CompleteWithin(ctx context.Context, db DB, cs []Completion, lockWait time.Duration) (Completed, error) {
	var out Completed
	slices.SortFunc(cs, func(a, b Completion) int { return int(a.Seq - b.Seq) })
	// The statements, in the order of their first completion: one per
	// note, those of requests sent apart from those without a request.
	type group struct {
		sent bool
		note string
	}
	byGroup := map[group][]Completion{}
	var groups []group
	for _, c := range cs {
		g := group{sent: !c.NoRequest, note: c.Note}
		if _, ok := byGroup[g]; !ok {
			groups = append(groups, g)
		}
		byGroup[g] = append(byGroup[g], c)
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(completeSettings, strconv.FormatInt(max(lockWait.Milliseconds(), 1), 10))
	for _, g := range groups {
		if g.sent {
			b.Queue(answerOn, g.note)
		} else {
			b.Queue(noteFor, g.note)
		}
		s.queueComplete(b, byGroup[g], g.sent)
	}
	statements := len(groups)
	marked := s.queueRetryAfterMarks(b, cs)
	announced := s.queueAnnounce(b, cs)
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
		if err := readWritten(br, written, &out); err != nil {
			return Completed{}, err
		}
	}
	if marked {
		if _, err := br.Exec(); err != nil {
			return Completed{}, fmt.Errorf("complete batch: record Retry-After: %w", err)
		}
	}
	if announced {
		if _, err := br.Exec(); err != nil {
			return Completed{}, fmt.Errorf("complete batch: record and announce settled calls: %w", err)
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

// readWritten reads the answers of one completion statement (after its
// audit settings): the rows written, and the runs whose saga may move.
func readWritten(br pgx.BatchResults, written map[int64]bool, out *Completed) error {
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("complete batch: audit settings: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("complete batch: %w", err)
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
		return fmt.Errorf("complete batch: %w", err)
	}
	return nil
}

// queueComplete queues the statement writing cs (sorted by seq).
func (s *Store) queueComplete(b *pgx.Batch, cs []Completion, answered bool) {
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
	gens := make([]int16, n)
	for i, c := range cs {
		seqs[i], tokens[i], statuses[i], errs[i], attempts[i], gens[i] = c.Seq, c.Token, string(c.Status), c.LastError, int32(c.Attempts), c.Gen
		floors[i] = c.Floor && !c.KeepNext
		if c.GiveBack && !c.Uncounted {
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
	b.Queue(s.sql(completeSQL), seqs, tokens, statuses, giveBack, delays, errs, problems, responses, codes, floors, attempts, answered, gens)
}
