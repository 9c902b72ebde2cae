package store

import (
	"context"
	"errors"
	"fmt"
	"github.com/drainer-io/drainer/outbox"
	"time"

	"github.com/jackc/pgx/v5"
)

// The statements of the operator console (internal/console): what its pages
// show beyond the operator commands' reads.

// RowFloor returns the not_before floor of the row of key (the earliest
// moment the provider allows its next attempt), nil when it has none.
func (s *Store) RowFloor(ctx context.Context, db DB, key string) (*time.Time, error) {
	var nb *time.Time
	err := db.QueryRow(ctx, s.sql(`SELECT not_before FROM {s}.outbox WHERE key = $1`), key).Scan(&nb)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return nb, err
}

// VerifyAuditKey checks the hash chain of one key, and that its row stands
// where the chain ends (as audit_verify does for every chain), and returns
// its broken links, first first.
func (s *Store) VerifyAuditKey(ctx context.Context, db DB, key string) ([]BrokenLink, error) {
	return collect[BrokenLink](ctx, db, s.sql(`SELECT id, key, problem FROM {s}.audit_problems($1) ORDER BY id`), key)
}

// ToolCount is the number of rows of one tool in one status.
type ToolCount struct {
	Tool   string        `json:"tool_name" db:"tool_name"`
	Status outbox.Status `json:"status" db:"status"`
	Rows   int64         `json:"rows" db:"rows"`
}

// workByToolSQL counts the rows that hold work (pending, in_flight,
// outcome_unknown, compensation_failed) by tool and status, through the
// status indexes of the queue alone (tool and status are on its rows: the
// outbox view would join every counted row to its intent).
const workByToolSQL = `SELECT tool_name, status, count(*) AS rows FROM {s}.queue
	    WHERE status IN ({StatusPending}, {StatusOutcomeUnknown}, {StatusCompensationFailed})
	    GROUP BY tool_name, status
	    UNION ALL
	    SELECT tool_name, status, count(*) FROM {s}.queue WHERE status = {StatusInFlight}
	    GROUP BY tool_name, status`

// CountsByTool counts the rows that hold work by tool and status, every
// tool (`drainer stats`). The console reads CountsByTopTools: producers
// name tools freely, so their number has no bound.
func (s *Store) CountsByTool(ctx context.Context, db DB) ([]ToolCount, error) {
	return collect[ToolCount](ctx, db, s.sql(workByToolSQL+` ORDER BY 1, 2`))
}

// ToolCounts is the work by tool, bounded: the tools with the most rows
// named, the others summed.
type ToolCounts struct {
	// Top are the rows of the tools with the most rows that hold work, by
	// tool and status, in tool then status order.
	Top []ToolCount
	// Tools is how many tools hold work: Top's and the others.
	Tools int64
	// Other counts the rows of the tools left out of Top, by status.
	Other map[outbox.Status]int64
}

// countsByTopToolsSQL ranks the tools by their work rows (ties by name)
// and names the first $1; the others' rows are summed by status under a
// null tool_name. tools counts every tool with work.
const countsByTopToolsSQL = `WITH c AS (` + workByToolSQL + `),
	t AS (SELECT tool_name, row_number() OVER (ORDER BY sum(rows) DESC, tool_name) AS rank FROM c GROUP BY tool_name)
	SELECT CASE WHEN t.rank <= $1 THEN c.tool_name END AS tool_name, c.status, sum(c.rows)::bigint AS rows,
	       (SELECT count(*) FROM t) AS tools
	  FROM c JOIN t USING (tool_name)
	 GROUP BY 1, 2
	 ORDER BY 1 NULLS LAST, 2`

// CountsByTopTools counts the rows that hold work by tool and status for
// the n tools with the most of them, and sums the others' by status: a
// result of at most 4·(n+1) rows however many tools producers name.
func (s *Store) CountsByTopTools(ctx context.Context, db DB, n int) (ToolCounts, error) {
	out := ToolCounts{Top: []ToolCount{}, Other: map[outbox.Status]int64{}}
	rows, err := db.Query(ctx, s.sql(countsByTopToolsSQL), n)
	if err != nil {
		return out, err
	}
	defer rows.Close()
	for rows.Next() {
		var tool *string
		var tc ToolCount
		if err := rows.Scan(&tool, &tc.Status, &tc.Rows, &out.Tools); err != nil {
			return out, err
		}
		if tool == nil {
			out.Other[tc.Status] += tc.Rows
			continue
		}
		tc.Tool = *tool
		out.Top = append(out.Top, tc)
	}
	return out, rows.Err()
}

// viewKeysSQL reads the keys of the rows matching a filter (%s) in seq
// order.
const viewKeysSQL = `SELECT o.key FROM {s}.outbox o WHERE %s ORDER BY o.seq LIMIT $1`

// ViewKeys returns the keys of the first limit rows matching f in seq
// order: the rows a console view holds, which its bulk actions act on.
func (s *Store) ViewKeys(ctx context.Context, db DB, f Filter, limit int) ([]string, error) {
	args := []any{limit}
	return keysOf(db.Query(ctx, s.sql(fmt.Sprintf(viewKeysSQL, f.where(&args))), args...))
}

// LedgerCheckMaxItems bounds the console's check of a key against the
// ledger: an 'entries' record of more items than this is not digested
// again for one row page (its bucket is found only by reading every entry
// it holds), and the page says the key was not verified against it.
const LedgerCheckMaxItems = 65536

// LedgerCheck is what the ledger says of one key's chain: the problems
// `drainer audit verify` reports about the records that hold it, and the
// records that were not checked.
type LedgerCheck struct {
	// Problems are those of audit_ledger_problems that concern the key:
	// its bucket's digest in each record that holds its entries, each such
	// record's hash and the link of the record after it, and its anchor
	// versions' records and order. Each has verify's id, key and text.
	Problems []BrokenLink
	// Unchecked are the records that hold the key's chain and whose
	// bucket was not digested again: an 'anchors' record (its anchors are
	// found only by reading them all), or an 'entries' record of more than
	// LedgerCheckMaxItems items.
	Unchecked []int64
}

// auditKeyLedgerSQL checks key $1 against the ledger as
// audit_ledger_problems does (migrations/code/functions), record by record
// but for the key's bucket alone. A row whose problem is null names a
// record left unchecked.
const auditKeyLedgerSQL = `WITH r AS (
	    SELECT l.*, {s}.audit_bucket($1, l.buckets) AS b,
	           (SELECT min(x.n) FROM {s}.audit_ledger x WHERE x.n > l.n) AS next_n
	      FROM {s}.audit_ledger l
	     WHERE (l.kind = 'entries'
	            AND EXISTS (SELECT 1 FROM {s}.audit_generations g WHERE g.epoch = l.epoch AND g.part = l.part AND NOT g.ready)
	            AND EXISTS (SELECT 1 FROM {s}.audit a WHERE a.key = $1 AND a.part = l.part
	                           AND a.id > l.from_id AND a.id <= l.upto_id))
	        OR (l.kind = 'anchors'
	            AND l.n IN (SELECT x.record FROM {s}.audit_anchors x WHERE x.key = $1
	                        UNION SELECT h.record FROM {s}.audit_anchor_history h WHERE h.key = $1)))
	SELECT r.n AS id, 'ledger' AS key, format('ledger record %s does not match its hash (edited)', r.n) AS problem
	  FROM r
	 WHERE r.hash IS DISTINCT FROM {s}.audit_ledger_hash(r.prev, r.n, r.kind, r.epoch, r.part, r.from_id, r.upto_id,
	                                                    r.items, r.buckets, r.digest, r.at)
	    OR (r.vector IS NOT NULL AND sha256(r.vector) IS DISTINCT FROM r.digest)
	UNION ALL
	SELECT nx.n, 'ledger', CASE WHEN nx.n <> r.n + 1
	                            THEN format('ledger record %s follows record %s (records were removed)', nx.n, r.n)
	                            ELSE format('ledger record %s does not link to the record before it (a record was removed, inserted or rewritten)', nx.n) END
	  FROM r JOIN {s}.audit_ledger nx ON nx.n = r.next_n
	 WHERE nx.n <> r.n + 1 OR nx.prev IS DISTINCT FROM r.hash
	UNION ALL
	SELECT r.n, $1, format('ledger record %s: the entries of generation %s (ids %s to %s) in bucket %s no longer match what it recorded (%s)',
	                       r.n, r.epoch, r.from_id + 1, r.upto_id, r.b,
	                       'this chain''s, or another''s in the bucket, rewritten with hashes recomputed, or removed')
	  FROM r
	 CROSS JOIN LATERAL (SELECT (SELECT substring(r.vector FROM i * 36 + 5 FOR 32)
	                               FROM generate_series(0, length(r.vector) / 36 - 1) AS i
	                              WHERE substring(r.vector FROM i * 36 + 1 FOR 4) = int4send(r.b)) AS recorded,
	                            (SELECT sha256(string_agg(int8send(a.id) || a.hash, ''::bytea ORDER BY a.id))
	                               FROM {s}.audit a
	                              WHERE a.part = r.part AND a.id > r.from_id AND a.id <= r.upto_id
	                                AND {s}.audit_bucket(a.key, r.buckets) = r.b) AS now) d
	 WHERE r.kind = 'entries' AND r.items <= $2 AND d.recorded IS DISTINCT FROM d.now
	UNION ALL
	SELECT r.n, NULL, NULL FROM r WHERE r.kind = 'anchors' OR r.items > $2
	UNION ALL
	SELECT v.record, $1, format('anchor of %s names ledger record %s, which the ledger does not hold', $1, v.record)
	  FROM (SELECT x.record FROM {s}.audit_anchors x WHERE x.key = $1
	        UNION SELECT h.record FROM {s}.audit_anchor_history h WHERE h.key = $1) v
	 WHERE v.record IS NOT NULL
	   AND NOT EXISTS (SELECT 1 FROM {s}.audit_ledger l WHERE l.n = v.record AND l.kind = 'anchors')
	UNION ALL
	SELECT h.vid, $1, format('the anchor of %s is not its latest version %s (anchors were swapped)', $1, h.vid)
	  FROM {s}.audit_anchor_history h JOIN {s}.audit_anchors x ON x.key = h.key
	 WHERE h.key = $1 AND h.vid > x.vid
	ORDER BY 1, 2, 3`

// VerifyAuditKeyLedger checks key's chain against the ledger: at the cost
// of the records that hold it (each 'entries' record's bucket of the key
// read again, at most LedgerCheckMaxItems entries each), not of the whole
// ledger's verification.
func (s *Store) VerifyAuditKeyLedger(ctx context.Context, db DB, key string) (LedgerCheck, error) {
	out := LedgerCheck{Problems: []BrokenLink{}, Unchecked: []int64{}}
	rows, err := db.Query(ctx, s.sql(auditKeyLedgerSQL), key, LedgerCheckMaxItems)
	if err != nil {
		return out, fmt.Errorf("check the audit of %s against the ledger: %w", key, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var k, problem *string
		if err := rows.Scan(&id, &k, &problem); err != nil {
			return out, err
		}
		if problem == nil {
			out.Unchecked = append(out.Unchecked, id)
			continue
		}
		out.Problems = append(out.Problems, BrokenLink{ID: id, Key: *k, Problem: *problem})
	}
	return out, rows.Err()
}
