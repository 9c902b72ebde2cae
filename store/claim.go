package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// ClaimedRow is one row leased to a replica.
type ClaimedRow struct {
	Seq            int64
	Key            string
	AgentRunID     string
	StepID         string
	ToolName       string
	BusinessScope  string
	Kind           outbox.Kind
	Payload        json.RawMessage
	Attempts       int // including the attempt this claim consumes
	LeaseToken     pgtype.UUID
	FirstAttemptAt time.Time
	DBNow          time.Time // the database clock at the claim
	// Due is when the row was due: with Seq, its position in the claim order.
	Due         time.Time
	Traceparent *string
	ForwardKey  *string
	// Gen is the generation (queue partition) the row was claimed in: its
	// completion looks for it there first (Completion.Gen).
	Gen int16
	// RunAborted: a forward row about to be sent for the first time whose
	// run is aborted (its enqueue committed after the abort, from a
	// snapshot that could not see it). It must be cancelled, not sent.
	RunAborted bool
	// Counted: the claim counted this attempt (Attempts includes it, and
	// FirstAttemptAt is set). It is false for a row whose tool was not in
	// Claim.Routed: the claimer has no route for it, so it is never sent
	// under this claim and consumes nothing, even when its replica dies
	// before handing it back (a reclaim keeps the attempts as they are);
	// its Payload is not read (nil).
	Counted bool
}

// Claim is what one claim asks for.
type Claim struct {
	// Limit bounds the rows leased (the replica's free worker slots).
	Limit int
	// Lease is how long the rows belong to Replica.
	Lease   time.Duration
	Replica string
	// Ordered lists the tools whose rows go out one at a time per
	// business_scope, in enqueue order.
	Ordered []string
	// Excluded lists the tools left alone (their deferral is under way).
	Excluded []string
	// Only, when not nil, lists the only tools whose rows are claimed (the
	// routed ones, while the rows without a route are being deferred).
	Only []string
	// Routed, when not nil, lists the tools the claimer has a route for:
	// the attempt of a row of any other tool is not counted (see
	// ClaimedRow.Counted). Nil counts every row's.
	Routed []string
	// Durable makes the claim wait for its commit to reach disk.
	Durable bool
	// After, when set, starts the scan past this position instead of at
	// the first due row: see Position.
	After *Position
	// MaxBytes, when positive, bounds the payload bytes leased: of the rows
	// locked, those are leased, in claim order, whose payloads before them
	// sum to less than MaxBytes (so the first always is); the others stay
	// pending, counted in Claimed.Withheld.
	MaxBytes int64
}

// Claimed is what one claim leased.
type Claimed struct {
	Rows []ClaimedRow
	// Withheld counts the due rows the claim locked and left pending for
	// Claim.MaxBytes: more rows are due than it took.
	Withheld int
}

// Position is a place in the claim order (next_attempt_at, seq). A replica
// that remembers the last row it claimed can start its next claim there,
// instead of reading again, from the start of the due index, the entries of
// every row claimed since the index was last vacuumed: under a large
// backlog, or while a long transaction holds back vacuum, that dead prefix
// grows with every claim and would make every claim slower. Rows that become
// due behind the position later (a transaction that commits late, a row
// handed back with its old due time) are found by the replica's periodic
// claims from the start.
type Position struct {
	Due time.Time
	Seq int64
}

// Later reports whether p comes after q in the claim order.
func (p Position) Later(q Position) bool {
	return p.Due.After(q.Due) || (p.Due.Equal(q.Due) && p.Seq > q.Seq)
}

// claimSQL leases due rows in one short statement: the lease is written on
// the narrow queue row (in whichever generation it lives), and the intent (tuple, payload) is read beside it,
// never rewritten. The locking subquery is MATERIALIZED so it runs once,
// whatever plan the UPDATE gets. The attempt
// is counted here, before dispatch, so a worker that dies mid-call has
// consumed it; outcomes that consume none give it back. A row of a tool
// the claimer has no route for is leased without counting one
// (Claim.Routed, {counted}): it will only be handed back.
const claimSQL = `
WITH due AS MATERIALIZED (
    SELECT seq, gen FROM {s}.queue o
     WHERE status = {StatusPending} AND next_attempt_at <= now()%s
     ORDER BY next_attempt_at, seq
     LIMIT $1
     FOR UPDATE SKIP LOCKED
)` + leaseSQL0 + `0` + leaseSQL1

// claimBoundedSQL is claimSQL with Claim.MaxBytes ($%d): the rows locked
// (locked) are leased (due) in claim order while the payloads before them
// sum to less than the bound. A payload's size is the one its row carries
// (queue.payload_bytes, its whole size when it was queued); a row queued
// before migration 026 carries none, and its payload is measured where it
// is: its stored size, or its text's length when it is stored compressed
// (a compressed payload's stored size can be a hundredth of it).
const claimBoundedSQL = `
WITH locked AS MATERIALIZED (
    SELECT seq, gen, next_attempt_at, payload_bytes FROM {s}.queue o
     WHERE status = {StatusPending} AND next_attempt_at <= now()%s
     ORDER BY next_attempt_at, seq
     LIMIT $1
     FOR UPDATE SKIP LOCKED
), due AS MATERIALIZED (
    SELECT b.seq, b.gen FROM (
        SELECT l.seq, l.gen, sum(z.bytes) OVER (ORDER BY l.next_attempt_at, l.seq) - z.bytes AS before
          FROM locked l
         CROSS JOIN LATERAL (SELECT coalesce(l.payload_bytes,
                                             (SELECT CASE WHEN pg_column_compression(i.payload) IS NULL
                                                          THEN pg_column_size(i.payload)
                                                          ELSE octet_length(i.payload::text) END
                                                FROM {s}.intents i WHERE i.seq = l.seq))::bigint AS bytes) z
    ) b
     WHERE b.before < $%d
)` + leaseSQL0 + `(SELECT count(*) FROM locked)::int - (SELECT count(*) FROM due)::int` + leaseSQL1

// claimKeySQL leases one row, by its key, when it is due: the gateway's
// lease of the call it records, in the same transaction (EnqueueLeased),
// or alone (ClaimKey). The row is found
// through its intent, not by the due index, and checked as claimSQL
// checks every row ($1 its key; the clauses' own parameters follow).
const claimKeySQL = `
WITH due AS MATERIALIZED (
    SELECT o.seq, o.gen FROM {s}.intents k JOIN {s}.queue o ON o.seq = k.seq
     WHERE k.key = $1 AND o.status = {StatusPending} AND o.next_attempt_at <= now()%s
     FOR UPDATE OF o SKIP LOCKED
)` + leaseSQL0 + `0` + leaseSQL1

// leaseSQL0 and leaseSQL1 lease the rows of the due CTE and return them as
// ClaimedRow reads them, followed by the count of rows withheld (written
// between the two: Claimed.Withheld).
const (
	leaseSQL0 = `, leased AS (
    UPDATE {s}.queue o
       SET status = {StatusInFlight},
           attempts = o.attempts + CASE WHEN {counted} THEN 1 ELSE 0 END,
           lease_token = gen_random_uuid(),
           lease_expires_at = now() + $2 * interval '1 millisecond',
           leased_by = $3,
           first_attempt_at = CASE WHEN {counted} THEN coalesce(o.first_attempt_at, now()) ELSE o.first_attempt_at END,
           updated_at = now()
      FROM due
     WHERE o.seq = due.seq AND o.gen = due.gen
    RETURNING o.seq, o.attempts, o.lease_token, o.first_attempt_at, o.next_attempt_at, o.gen, {counted} AS counted
)
SELECT l.seq, i.key, i.agent_run_id, i.step_id, i.tool_name, i.business_scope, i.kind,
       CASE WHEN l.counted THEN i.payload END, l.attempts, l.lease_token, coalesce(l.first_attempt_at, now()), now(), i.traceparent, i.forward_key, l.next_attempt_at,
       i.kind = {KindForward} AND l.attempts = CASE WHEN l.counted THEN 1 ELSE 0 END
           AND EXISTS (SELECT 1 FROM {s}.runs r WHERE r.agent_run_id = i.agent_run_id),
       l.counted, l.gen, `
	leaseSQL1 = `
  FROM leased l
  JOIN {s}.intents i ON i.seq = l.seq
 ORDER BY l.next_attempt_at, l.seq`
)

// afterClause starts the scan of the due index past a position.
const afterClause = `
       AND (o.next_attempt_at, o.seq) > ($%d::timestamptz, $%d::bigint)`

// orderedClause keeps rows of tools with ordering: business_scope behind any
// earlier row of their scope that is still pending or in flight.
const orderedClause = `
       AND (o.tool_name <> ALL($%d::text[]) OR NOT EXISTS (
            SELECT 1 FROM {s}.queue p
             WHERE p.tool_name = o.tool_name AND p.business_scope = o.business_scope
               AND p.seq < o.seq AND p.status IN ({StatusPending}, {StatusInFlight})))`

// excludedClause leaves the rows of some tools alone.
const excludedClause = `
       AND o.tool_name <> ALL($%d::text[])`

// onlyClause claims the rows of some tools only.
const onlyClause = `
       AND o.tool_name = ANY($%d::text[])`

// claimPlanSettings pin the claim to the ordered scan of queue_due_idx,
// and the lease to one look-up of each claimed row in its own generation
// (the partition the join's gen prunes to at run time), whatever the
// statistics say. Planned from stale statistics (a backlog that
// grew faster than autovacuum analyzes, or a statement prepared while the
// table was empty) the claim would otherwise bitmap-scan and sort every due
// row to return a handful: at a 10^6 backlog, seconds per claim exactly when
// the drain is busiest. JIT is off: a claim's estimate can cross
// jit_above_cost, and compiling costs more than the claim. They are
// transaction-local.
//
// With its shape pinned, the claim's plan does not depend on its
// parameters, so it is planned once per connection (the generic plan of
// the prepared statement, kept until the tables' definitions or statistics
// change) rather than on every claim: planning the claim over every
// generation's indexes cost 0.8 ms, more than leasing a handful of rows.
// A plan made while the queue was empty has the same shape (the ordered
// scans merged across the generations), so it stays right as the backlog
// grows (docs/benchmark-results.md, "The claim's plan, made once").
//
// synchronous_commit is off ($1) unless the claim must be durable: a claim
// lost in a database crash puts its rows back to pending, and they are sent
// again with the same key. Providers that honour the key answer with a
// replay; a non_idempotent route could repeat the effect, so while the
// routing has one, claims wait for their commit to reach disk.
const claimPlanSettings = `SELECT set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true),
       set_config('enable_hashjoin', 'off', true),
       set_config('enable_mergejoin', 'off', true),
       set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('jit', 'off', true),
       set_config('synchronous_commit', $1, true)`

// Claim leases up to c.Limit due rows, in one round trip: BEGIN, the plan
// settings, the claim, COMMIT.
func (s *Store) Claim(ctx context.Context, db DB, c Claim) ([]ClaimedRow, error) {
	got, err := s.ClaimBatch(ctx, db, c)
	return got.Rows, err
}

// ClaimBatch is Claim, saying also how many due rows it withheld for
// c.MaxBytes.
func (s *Store) ClaimBatch(ctx context.Context, db DB, c Claim) (Claimed, error) {
	args := []any{c.Limit, c.Lease.Milliseconds(), c.Replica}
	extra, counted, args := c.clauses(args)
	if c.After != nil {
		args = append(args, c.After.Due, c.After.Seq)
		extra += fmt.Sprintf(afterClause, len(args)-1, len(args))
	}
	sql := fmt.Sprintf(claimSQL, extra)
	if c.MaxBytes > 0 {
		args = append(args, c.MaxBytes)
		sql = fmt.Sprintf(claimBoundedSQL, extra, len(args))
	}
	return s.leaseBatch(ctx, db, "claim", claimPlanSettings, c.Durable, s.sql(strings.ReplaceAll(sql, "{counted}", counted)), args)
}

// ClaimKey leases the row of key, when it is due and c would claim it
// (c.Ordered, c.Excluded; c.Limit and c.After are not used), in a
// transaction of its own: the lease EnqueueLeased takes in the record's
// transaction, for a row recorded before (the engine's tests of
// Engine.Lease use it). It returns no row when the row is not due, is
// leased already (another replica claimed it first), or is held by its
// scope's order.
func (s *Store) ClaimKey(ctx context.Context, db DB, key string, c Claim) (*ClaimedRow, error) {
	extra, counted, args := c.clauses([]any{key, c.Lease.Milliseconds(), c.Replica})
	rows, err := s.lease(ctx, db, "claim by key", claimKeySettings, c.Durable, s.sql(strings.ReplaceAll(fmt.Sprintf(claimKeySQL, extra), "{counted}", counted)), args)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return &rows[0], nil
}

// clauses appends the parameters of c's ordered, excluded and only
// clauses, and of its routed tools, to args, and returns the clauses and
// the test of a counted attempt, for {counted} in the statement.
func (c Claim) clauses(args []any) (string, string, []any) {
	counted := "true"
	if c.Routed != nil {
		args = append(args, c.Routed)
		counted = fmt.Sprintf("o.tool_name = ANY($%d::text[])", len(args))
	}
	var extra string
	if len(c.Ordered) > 0 {
		args = append(args, c.Ordered)
		extra += fmt.Sprintf(orderedClause, len(args))
	}
	if len(c.Excluded) > 0 {
		args = append(args, c.Excluded)
		extra += fmt.Sprintf(excludedClause, len(args))
	}
	if c.Only != nil {
		args = append(args, c.Only)
		extra += fmt.Sprintf(onlyClause, len(args))
	}
	return extra, counted, args
}

// claimKeySettings: a claim by key looks one row up by its unique key and
// primary key, which every plan does, so the plan is the generic one from
// a connection's first claim (planned once, not anew for each of its
// first five as the default plan cache mode does: planning an update of
// every queue generation costs milliseconds); with the commit's
// durability and no JIT. EnqueueLeasedBatch sets the same
// (enqueueLeasedSettings).
const claimKeySettings = `SELECT set_config('jit', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('synchronous_commit', $1, true)`

// enqueueLeasedSettings are those of EnqueueLeasedBatch's transaction: no
// notification of its rows (they are leased in it), and the claim by
// key's plan settings (claimKeySettings).
const enqueueLeasedSettings = `SELECT set_config('drainer.notify', 'off', true), set_config('jit', 'off', true),
       set_config('plan_cache_mode', 'force_generic_plan', true)`

// lease runs one leasing statement in its own transaction, in one round
// trip: BEGIN, settings ($1: synchronous_commit), the statement, COMMIT.
func (s *Store) lease(ctx context.Context, db DB, what, settings string, durable bool, sql string, args []any) ([]ClaimedRow, error) {
	got, err := s.leaseBatch(ctx, db, what, settings, durable, sql, args)
	return got.Rows, err
}

// leaseBatch is lease, with the count of rows withheld.
func (s *Store) leaseBatch(ctx context.Context, db DB, what, settings string, durable bool, sql string, args []any) (Claimed, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	syncCommit := "off"
	if durable {
		syncCommit = "on"
	}
	b.Queue(settings, syncCommit)
	b.Queue(sql, args...)
	b.Queue("COMMIT")
	br := db.SendBatch(ctx, b)
	defer br.Close()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return Claimed{}, fmt.Errorf("%s: %w", what, err)
		}
	}
	got, err := readLeased(br)
	if err != nil {
		return Claimed{}, fmt.Errorf("%s: %w", what, err)
	}
	if _, err := br.Exec(); err != nil {
		return Claimed{}, fmt.Errorf("%s commit: %w", what, err)
	}
	return got, br.Close()
}

// readLeased reads the answer of a leasing statement (leaseSQL0,
// leaseSQL1) from br.
func readLeased(br pgx.BatchResults) (Claimed, error) {
	rows, err := br.Query()
	if err != nil {
		return Claimed{}, err
	}
	var withheld int
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ClaimedRow, error) {
		var c ClaimedRow
		err := r.Scan(&c.Seq, &c.Key, &c.AgentRunID, &c.StepID, &c.ToolName, &c.BusinessScope, &c.Kind,
			&c.Payload, &c.Attempts, &c.LeaseToken, &c.FirstAttemptAt, &c.DBNow, &c.Traceparent, &c.ForwardKey, &c.Due, &c.RunAborted, &c.Counted, &c.Gen,
			&withheld)
		return c, err
	})
	return Claimed{Rows: out, Withheld: withheld}, err
}
