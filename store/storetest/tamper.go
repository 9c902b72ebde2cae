package storetest

import (
	"context"
	"github.com/drainer-io/drainer/outbox"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The tamperers below do to a key's audit what someone who can write the
// database (its owner, a superuser) could, so that tests can check that
// `drainer audit verify` reports it, before and after the rotation. Each
// fails t when the key has nothing to tamper with; each returns the id of
// the entry (or anchor version) it touched.

// TamperEdit changes the actor of the oldest remaining entry of key's
// chain, leaving its hash as it was.
func TamperEdit(t testing.TB, pool *pgxpool.Pool, key string) int64 {
	t.Helper()
	return tamper(t, pool, "edit", `UPDATE `+Schema+`.audit SET actor = 'mallory'
	    WHERE id = (SELECT min(id) FROM `+Schema+`.audit WHERE key = $1) RETURNING id`, key)
}

// TamperDelete deletes the oldest remaining entry of key's chain that has
// an entry after it.
func TamperDelete(t testing.TB, pool *pgxpool.Pool, key string) int64 {
	t.Helper()
	return tamper(t, pool, "delete", `DELETE FROM `+Schema+`.audit
	    WHERE id = (SELECT min(a.id) FROM `+Schema+`.audit a WHERE a.key = $1
	                   AND EXISTS (SELECT 1 FROM `+Schema+`.audit b WHERE b.key = a.key AND b.id > a.id)) RETURNING id`, key)
}

// TamperInsert inserts a forged entry into key's chain right after its
// oldest remaining entry: the forgery is hashed right and links to that
// entry, and takes a free id between it and the chain's next entry (which
// still links to the entry before the forgery), or else a new id (the
// forgery then ends the chain, and the row's head is not its hash).
func TamperInsert(t testing.TB, pool *pgxpool.Pool, key string) int64 {
	t.Helper()
	return tamper(t, pool, "insert", `INSERT INTO `+Schema+`.audit (id, key, at, event, from_status, to_status, attempts, actor, prev_hash, hash, part)
	    SELECT coalesce((SELECT min(g) FROM generate_series(f.id + 1, f.next - 1) AS g
	                      WHERE NOT EXISTS (SELECT 1 FROM `+Schema+`.audit x WHERE x.id = g)),
	                    nextval('`+Schema+`.audit_entry_id')),
	           f.key, f.at, 'operator:cancel', f.to_status, `+outbox.StatusCancelled.SQL()+`, f.attempts, 'mallory', f.hash,
	           `+Schema+`.audit_hash(f.hash, f.key, f.at, 'operator:cancel', f.to_status, `+outbox.StatusCancelled.SQL()+`, f.attempts, NULL, 'mallory', NULL, NULL),
	           f.part
	      FROM (SELECT a.*, (SELECT min(b.id) FROM `+Schema+`.audit b WHERE b.key = a.key AND b.id > a.id) AS next
	              FROM `+Schema+`.audit a WHERE a.key = $1 ORDER BY a.id LIMIT 1) f
	    RETURNING id`, key)
}

// TamperStatus sets the status of key's row with the audit triggers off,
// so that no entry records it.
func TamperStatus(t testing.TB, pool *pgxpool.Pool, key string, status outbox.Status) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `ALTER TABLE `+Schema+`.queue DISABLE TRIGGER queue_audit_update`); err != nil {
		t.Fatal(err)
	}
	tag, err := tx.Exec(ctx, `UPDATE `+Schema+`.queue q SET status = $2, lease_token = NULL, lease_expires_at = NULL
	    FROM `+Schema+`.intents i WHERE i.seq = q.seq AND i.key = $1`, key, status)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("tamper status of %s: %v (%d rows)", key, err, tag.RowsAffected())
	}
	if _, err := tx.Exec(ctx, `ALTER TABLE `+Schema+`.queue ENABLE TRIGGER queue_audit_update`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TamperRow deletes key's row through the outbox view, outside retention:
// no trigger records it, and no tombstone is written.
func TamperRow(t testing.TB, pool *pgxpool.Pool, key string) {
	t.Helper()
	tag, err := pool.Exec(context.Background(), `DELETE FROM `+Schema+`.outbox WHERE key = $1`, key)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("tamper: delete the row of %s: %v (%d rows)", key, err, tag.RowsAffected())
	}
}

// TamperAnchor deletes the current anchor of key's chain (as if the
// chain had never been truncated).
func TamperAnchor(t testing.TB, pool *pgxpool.Pool, key string) int64 {
	t.Helper()
	return tamper(t, pool, "delete the anchor of", `DELETE FROM `+Schema+`.audit_anchors WHERE key = $1 RETURNING 0::bigint`, key)
}

// RewriteChain rewrites key's chain the way only someone who knows the
// hash functions can: its anchor, if it has one, gets another hash (and
// its record's digest follows), every remaining entry of the chain gets
// another actor, every hash from there on is recomputed, the row's head
// moves to the new last hash, and the ledger's records are digested again
// and chained again from the first. `drainer audit verify` finds nothing;
// only a checkpoint signed before tells.
func RewriteChain(t testing.TB, pool *pgxpool.Pool, key string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT set_config('tamper.key', $1, false)`, key); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, rewriteChainSQL); err != nil {
		t.Fatalf("rewrite the chain of %s: %v", key, err)
	}
	if _, err := conn.Exec(ctx, RechainLedgerSQL); err != nil {
		t.Fatalf("chain the ledger again: %v", err)
	}
}

const rewriteChainSQL = `DO $$
DECLARE
    k      text := current_setting('tamper.key');
    v_prev bytea;
    e      record;
    n      int := 0;
BEGIN
    UPDATE ` + Schema + `.audit_anchors x
       SET hash = sha256('forged' || x.hash),
           row_hash = ` + Schema + `.audit_anchor_hash(x.vid, x.key, sha256('forged' || x.hash), x.last_id, x.status,
                                                       x.attempts, x.problem, x.record)
     WHERE x.key = k
    RETURNING x.hash INTO v_prev;
    FOR e IN SELECT * FROM ` + Schema + `.audit a WHERE a.key = k ORDER BY a.id LOOP
        IF n = 0 AND v_prev IS NULL THEN
            v_prev := e.prev_hash;
        END IF;
        n := n + 1;
        UPDATE ` + Schema + `.audit a
           SET actor = 'mallory', prev_hash = v_prev,
               hash = ` + Schema + `.audit_hash(v_prev, e.key, e.at, e.event, e.from_status, e.to_status, e.attempts,
                                                e.response_status, 'mallory', e.reason, e.detail_sha256)
         WHERE a.id = e.id
        RETURNING a.hash INTO v_prev;
    END LOOP;
    IF v_prev IS NULL THEN
        RAISE EXCEPTION 'key % has no chain', k;
    END IF;
    UPDATE ` + Schema + `.queue q SET audit_head = v_prev FROM ` + Schema + `.intents i WHERE i.seq = q.seq AND i.key = k;
END
$$`

// RechainLedgerSQL digests every ledger record again from what the
// database holds now and chains the records again, as someone covering a
// rewrite would.
const RechainLedgerSQL = `DO $$
DECLARE
    r       record;
    v_prev  bytea;
    v_items bigint;
    v_vec   bytea;
    v_dig   bytea;
BEGIN
    FOR r IN SELECT * FROM ` + Schema + `.audit_ledger ORDER BY n LOOP
        v_items := r.items;
        v_vec := r.vector;
        IF r.kind = 'entries' AND r.vector IS NOT NULL THEN
            SELECT v.items, v.vector INTO v_items, v_vec
              FROM ` + Schema + `.audit_entries_vector(r.part, r.from_id, r.upto_id, r.buckets) v;
        ELSIF r.kind IN ('anchors', 'retired') THEN
            SELECT v.items, v.vector INTO v_items, v_vec
              FROM ` + Schema + `.audit_anchors_vector(CASE WHEN r.kind = 'anchors' THEN r.n ELSE r.from_id END, r.buckets) v;
        END IF;
        v_dig := coalesce(sha256(v_vec), r.digest);
        UPDATE ` + Schema + `.audit_ledger l
           SET items = v_items, vector = v_vec, digest = v_dig, prev = v_prev,
               hash = ` + Schema + `.audit_ledger_hash(v_prev, r.n, r.kind, r.epoch, r.part, r.from_id, r.upto_id,
                                                       v_items, r.buckets, v_dig, r.at)
         WHERE l.n = r.n
        RETURNING l.hash INTO v_prev;
    END LOOP;
END
$$`

func tamper(t testing.TB, pool *pgxpool.Pool, what, sql, key string) int64 {
	t.Helper()
	var id int64
	if err := pool.QueryRow(context.Background(), sql, key).Scan(&id); err != nil {
		t.Fatalf("%s the audit of %s: %v", what, key, err)
	}
	return id
}
