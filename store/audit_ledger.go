package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// LedgerRecord is one record of the audit's ledger (audit_ledger in
// migrations/schema.sql): one hash chain over the audit's entries (Kind
// "entries": a generation's ids in (FromID, UptoID]), the anchors one
// anchoring wrote ("anchors"), truncations ("truncated") and what is left
// of an anchors record (FromID) once forgotten chains' versions left it
// ("retired", audit_retire_anchors). Vector holds
// each non-empty bucket of items (4-byte number, 32-byte digest), Digest
// its SHA-256; Hash covers Prev and every field but Vector.
type LedgerRecord struct {
	N       int64     `db:"n"`
	Kind    string    `db:"kind"`
	Epoch   *int64    `db:"epoch"`
	Part    *int16    `db:"part"`
	FromID  *int64    `db:"from_id"`
	UptoID  *int64    `db:"upto_id"`
	Items   int64     `db:"items"`
	Buckets int32     `db:"buckets"`
	Digest  []byte    `db:"digest"`
	Vector  []byte    `db:"vector"`
	At      time.Time `db:"at"`
	Prev    []byte    `db:"prev"`
	Hash    []byte    `db:"hash"`
}

// AuditLedger returns every record of the ledger, in order; the vectors
// of records before vectorsFrom are left out (nil).
func (s *Store) AuditLedger(ctx context.Context, db DB, vectorsFrom int64) ([]LedgerRecord, error) {
	recs, err := collect[LedgerRecord](ctx, db, s.sql(`SELECT n, kind, epoch, part, from_id, upto_id, items, buckets,
	        digest, CASE WHEN n >= $1 THEN vector END AS vector, at, prev, hash
	   FROM {s}.audit_ledger ORDER BY n`), vectorsFrom)
	if err != nil {
		return nil, fmt.Errorf("read audit ledger: %w", err)
	}
	return recs, nil
}

// AuditGeneration is one of the audit's generations (audit_generations):
// Epoch tells generations apart (part numbers come round again; nil while
// Ready, truncated and unused); AnchorRecord is the ledger record of its
// anchors once anchored.
type AuditGeneration struct {
	Part         int16  `db:"part"`
	Epoch        *int64 `db:"epoch"`
	Ready        bool   `db:"ready"`
	AnchorRecord *int64 `db:"anchor_record"`
	// Empty: no entry is left in it (or none this snapshot can see: a
	// truncation committed after it was taken).
	Empty bool `db:"empty"`
}

// AuditGenerations returns the audit's four generations.
func (s *Store) AuditGenerations(ctx context.Context, db DB) ([]AuditGeneration, error) {
	gens, err := collect[AuditGeneration](ctx, db, s.sql(`SELECT g.part, g.epoch, g.ready, g.anchor_record,
	        NOT EXISTS (SELECT 1 FROM {s}.audit a WHERE a.part = g.part) AS empty
	   FROM {s}.audit_generations g ORDER BY g.part`))
	if err != nil {
		return nil, fmt.Errorf("read audit generations: %w", err)
	}
	return gens, nil
}

// AuditHorizon returns the largest audit entry id handed out so far and
// the transactions running now (audit_horizon): once none of them runs
// (TransactionsRunning), every entry with an id up to upto is written for
// good, or never will be.
func (s *Store) AuditHorizon(ctx context.Context, db DB) (upto int64, waitFor []string, err error) {
	if err := db.QueryRow(ctx, s.sql(`SELECT upto, wait_for FROM {s}.audit_horizon()`)).Scan(&upto, &waitFor); err != nil {
		return 0, nil, fmt.Errorf("audit horizon: %w", err)
	}
	return upto, waitFor, nil
}

// TransactionsRunning reports whether one of the transactions named (by
// AuditHorizon) is still running (any_running).
func (s *Store) TransactionsRunning(ctx context.Context, db DB, vxids []string) (bool, error) {
	var running bool
	if err := db.QueryRow(ctx, s.sql(`SELECT {s}.any_running($1)`), vxids).Scan(&running); err != nil {
		return false, fmt.Errorf("transactions running: %w", err)
	}
	return running, nil
}

// ExtendAuditLedger records in the ledger every entry with an id up to
// upto that no record holds yet (audit_ledger_extend; upto from
// AuditHorizon, whose transactions have ended) and returns the ledger's
// last record and its hash (n 0 and no hash: the ledger is empty).
func (s *Store) ExtendAuditLedger(ctx context.Context, db DB, upto int64) (n int64, hash []byte, err error) {
	var last *int64
	if err := db.QueryRow(ctx, s.sql(`SELECT n, hash FROM {s}.audit_ledger_extend($1)`), upto).Scan(&last, &hash); err != nil {
		return 0, nil, fmt.Errorf("extend audit ledger: %w", err)
	}
	if last != nil {
		n = *last
	}
	return n, hash, nil
}

// RawAuditEntry is an audit entry with every field its hash covers.
type RawAuditEntry struct {
	ID             int64
	Key            string
	At             time.Time
	Event          string
	FromStatus     *string
	ToStatus       *string
	Attempts       *int32
	ResponseStatus *int32
	Actor          string
	Reason         *string
	DetailSHA256   []byte
	PrevHash       []byte
	Hash           []byte
}

// EachAuditEntry calls fn with each entry of generation part whose id is
// in (from, upto], in id order (fn's entry is reused: copy what it keeps).
func (s *Store) EachAuditEntry(ctx context.Context, db DB, part int16, from, upto int64, fn func(*RawAuditEntry) error) error {
	rows, err := db.Query(ctx, s.sql(`SELECT id, key, at, event, from_status, to_status, attempts, response_status,
	        actor, reason, detail_sha256, prev_hash, hash
	   FROM {s}.audit WHERE part = $1 AND id > $2 AND id <= $3 ORDER BY id`), part, from, upto)
	if err != nil {
		return fmt.Errorf("read audit entries: %w", err)
	}
	var e RawAuditEntry
	_, err = pgx.ForEachRow(rows, []any{&e.ID, &e.Key, &e.At, &e.Event, &e.FromStatus, &e.ToStatus, &e.Attempts,
		&e.ResponseStatus, &e.Actor, &e.Reason, &e.DetailSHA256, &e.PrevHash, &e.Hash}, func() error { return fn(&e) })
	if err != nil {
		return fmt.Errorf("read audit entries: %w", err)
	}
	return nil
}

// AnchorVersion is one version of a chain's anchor (audit_anchors holds
// the current one, audit_anchor_history those before): the hash and id of
// the last entry it stands for, the chain's last status and attempts then,
// the problems found in those entries, and the ledger record that holds it.
type AnchorVersion struct {
	Vid      int64
	Key      string
	Hash     []byte
	LastID   *int64
	Status   *string
	Attempts *int32
	Problem  *string
	Record   *int64
	RowHash  []byte
}

// AnchorVersionsByVid returns the key and row hash of each anchor
// version of vids still there (current or older), by vid, in one
// statement.
func (s *Store) AnchorVersionsByVid(ctx context.Context, db DB, vids []int64) (map[int64]AnchorVersion, error) {
	rows, err := db.Query(ctx, s.sql(`SELECT vid, key, row_hash FROM {s}.audit_anchors WHERE vid = ANY ($1)
	  UNION ALL
	 SELECT vid, key, row_hash FROM {s}.audit_anchor_history WHERE vid = ANY ($1)`), vids)
	if err != nil {
		return nil, fmt.Errorf("read audit anchors by vid: %w", err)
	}
	out := make(map[int64]AnchorVersion, len(vids))
	var x AnchorVersion
	_, err = pgx.ForEachRow(rows, []any{&x.Vid, &x.Key, &x.RowHash}, func() error {
		out[x.Vid] = AnchorVersion{Vid: x.Vid, Key: x.Key, RowHash: x.RowHash}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read audit anchors by vid: %w", err)
	}
	return out, nil
}

// EachAnchorVersion calls fn with each anchor version that ledger record
// record holds, in vid order (fn's version is reused).
func (s *Store) EachAnchorVersion(ctx context.Context, db DB, record int64, fn func(*AnchorVersion) error) error {
	rows, err := db.Query(ctx, s.sql(`SELECT vid, key, hash, last_id, status, attempts, problem, record, row_hash
	   FROM {s}.audit_anchors WHERE record = $1
	  UNION ALL
	 SELECT vid, key, hash, last_id, status, attempts, problem, record, row_hash
	   FROM {s}.audit_anchor_history WHERE record = $1
	  ORDER BY vid`), record)
	if err != nil {
		return fmt.Errorf("read audit anchors: %w", err)
	}
	var v AnchorVersion
	_, err = pgx.ForEachRow(rows, []any{&v.Vid, &v.Key, &v.Hash, &v.LastID, &v.Status, &v.Attempts, &v.Problem,
		&v.Record, &v.RowHash}, func() error { return fn(&v) })
	if err != nil {
		return fmt.Errorf("read audit anchors: %w", err)
	}
	return nil
}
