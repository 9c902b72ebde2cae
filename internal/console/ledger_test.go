package console

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// tamperLastEntry edits the last entry of key's chain as a superuser with
// the triggers off: another actor, its hash recomputed, the row's head
// moved to it. The chain still verifies; only the ledger record that holds
// the entry tells.
func (e *env) tamperLastEntry(key string) {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	s := storetest.Schema
	var hash []byte
	for _, q := range []string{`SET LOCAL session_replication_role = replica`,
		`UPDATE ` + s + `.audit a SET actor = 'mallory',
		        hash = ` + s + `.audit_hash(a.prev_hash, a.key, a.at, a.event, a.from_status, a.to_status, a.attempts,
		                                    a.response_status, 'mallory', a.reason, a.detail_sha256)
		  WHERE a.id = (SELECT max(id) FROM ` + s + `.audit WHERE key = $1) RETURNING a.hash`} {
		if strings.HasPrefix(q, "SET") {
			_, err = tx.Exec(ctx, q)
		} else {
			err = tx.QueryRow(ctx, q, key).Scan(&hash)
		}
		if err != nil {
			e.t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE `+s+`.queue q SET audit_head = $2 FROM `+s+`.intents i
	    WHERE i.seq = q.seq AND i.key = $1`, key, hash); err != nil {
		e.t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// TestRowAuditMatchesVerify: a settled row's last entry rewritten with
// its hash recomputed after the ledger recorded it passes the chain check,
// but `drainer audit verify` names the key from the ledger's bucket; the
// row's API and page say what verify says of every key, not "verified".
func TestRowAuditMatchesVerify(t *testing.T) {
	e := newEnv(t, false)
	ctx := context.Background()
	keys := e.enqueue("run-ledger", "tool", "scope", 8)
	for _, k := range keys {
		e.exec(`UPDATE drainer.queue q SET status = 'cancelled' FROM drainer.intents i WHERE i.seq = q.seq AND i.key = $1`, k)
	}
	st := store.MustNew("")
	upto, _, err := st.AuditHorizon(ctx, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.ExtendAuditLedger(ctx, e.pool, upto); err != nil {
		t.Fatal(err)
	}
	var before RowDetail
	e.getJSON("/api/v1/rows/"+keys[0], 200, &before)
	if !before.AuditVerified || len(before.AuditBroken) != 0 {
		t.Fatalf("before the edit: audit_verified %v, audit_broken %v", before.AuditVerified, before.AuditBroken)
	}
	e.tamperLastEntry(keys[0])
	all, err := st.VerifyAudit(ctx, e.pool, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		var want []string
		for _, p := range all {
			if p.Key == k || p.Key == "ledger" {
				want = append(want, p.Problem)
			}
		}
		var d RowDetail
		e.getJSON("/api/v1/rows/"+k, 200, &d)
		var got []string
		for _, p := range d.AuditBroken {
			got = append(got, p.Problem)
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) || d.AuditVerified != (len(want) == 0) {
			t.Errorf("%s: audit_verified %v, audit_broken %q; verify says %q", k, d.AuditVerified, got, want)
		}
		if k == keys[0] && len(want) == 0 {
			t.Fatalf("verify found nothing wrong with the edited chain: %v", all)
		}
	}
	_, body := e.get("/rows/" + keys[0])
	if strings.Contains(body, "chain verified") || !strings.Contains(body, "chain broken") ||
		!strings.Contains(body, "no longer match what it recorded") {
		t.Errorf("row page of the edited chain:\n%s", body)
	}
}
