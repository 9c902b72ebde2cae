package ops

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// writeKeys writes a fresh Ed25519 key pair into dir as PEM files (the
// private key PKCS #8, mode 600; the public key PKIX) and returns their
// paths.
func writeKeys(t *testing.T, dir string) (keyFile, pubFile string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	keyFile, pubFile = filepath.Join(dir, "audit.key"), filepath.Join(dir, "audit.pub")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	return keyFile, pubFile
}

// signer is a key pair and a directory of checkpoints.
type signer struct {
	key ed25519.PrivateKey
	pub ed25519.PublicKey
	dir string
}

func newSigner(t *testing.T) *signer {
	t.Helper()
	keyFile, pubFile := writeKeys(t, t.TempDir())
	key, err := LoadSigningKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := LoadPublicKey(pubFile)
	if err != nil {
		t.Fatal(err)
	}
	return &signer{key: key, pub: pub, dir: t.TempDir()}
}

func (s *signer) checkpoint(t *testing.T, e *env) *CheckpointResult {
	t.Helper()
	r, err := e.c.Checkpoint(context.Background(), CheckpointOptions{Dir: s.dir, Key: s.key})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (s *signer) verify(t *testing.T, e *env) *CheckpointVerification {
	t.Helper()
	v, err := e.c.VerifyCheckpoints(context.Background(), s.dir, s.pub)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// rotateAway turns the audit's generations (retention and span zero)
// until no entry written so far is left.
func rotateAway(t *testing.T, e *env) {
	t.Helper()
	st := store.MustNew("")
	for steps := 0; e.count(`SELECT count(*) FROM drainer.audit`) > 0; steps++ {
		s, err := st.RotateAudit(context.Background(), e.pool, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if s == "waiting" || s == "busy" {
			time.Sleep(2 * time.Millisecond) // another test's transaction
		}
		if steps > 20_000 {
			t.Fatalf("the rotation stalled at %s", s)
		}
	}
}

func verifiesClean(t *testing.T, e *env, when string) {
	t.Helper()
	v, err := e.c.VerifyAudit(context.Background(), 100)
	if err != nil || !v.OK {
		t.Fatalf("audit verify %s: %+v %v", when, v, err)
	}
}

// TestAuditHashesEqualTheDatabase: the Go hash functions that
// verify --checkpoints recomputes with (entries, ledger records, anchor
// versions, bucket vectors) give what the database's functions gave, for
// entries of every kind (an answer's status, a reason, an error's digest,
// an operator's note without a status) and after a rotation.
func TestAuditHashesEqualTheDatabase(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	st, ctx := store.MustNew(""), context.Background()
	entries, anchors, kinds := 0, 0, map[int64]string{}
	compare := func() {
		t.Helper()
		recs, err := st.AuditLedger(ctx, e.pool, 1)
		if err != nil {
			t.Fatal(err)
		}
		for i := range recs {
			r := &recs[i]
			kinds[r.N] = r.Kind
			if got := LedgerHash(r); !bytes.Equal(got, r.Hash) {
				t.Errorf("ledger record %d: Go hash %x, database %x", r.N, got, r.Hash)
			}
			v := newVectorBuilder(r.Buckets)
			var err error
			switch {
			case r.Kind == "entries" && r.Vector != nil:
				err = st.EachAuditEntry(ctx, e.pool, *r.Part, *r.FromID, *r.UptoID, func(x *store.RawAuditEntry) error {
					entries++
					if got := EntryHash(x); !bytes.Equal(got, x.Hash) {
						t.Errorf("entry %d (%s %s): Go hash %x, database %x", x.ID, x.Key, x.Event, got, x.Hash)
					}
					v.add(x.Key, x.ID, x.Hash)
					return nil
				})
			case r.Kind == "anchors":
				err = st.EachAnchorVersion(ctx, e.pool, r.N, func(x *store.AnchorVersion) error {
					anchors++
					if got := AnchorHash(x); !bytes.Equal(got, x.RowHash) {
						t.Errorf("anchor %d (%s): Go hash %x, database %x", x.Vid, x.Key, got, x.RowHash)
					}
					v.add(x.Key, x.Vid, x.RowHash)
					return nil
				})
			default:
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(v.vector(), r.Vector) || v.items != r.Items {
				t.Errorf("ledger record %d (%s): Go vector of %d items differs from the database's of %d", r.N, r.Kind, v.items, r.Items)
			}
		}
	}
	mixedHistory(t, e)
	e.exec(`UPDATE drainer.outbox SET status = 'pending', last_error = 'boom' WHERE status = 'in_flight'`)
	// An answer to a request sent: its entry records the provider's status.
	a := e.enqueue("r3", "charge", 1)[0]
	e.set(a, "in_flight", 1)
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('drainer.answer', 'on', true)`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE drainer.outbox SET status = 'succeeded', response_status = 201, lease_token = NULL WHERE key = $1`, a); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if e.count(`SELECT count(*) FROM drainer.audit WHERE response_status = 201 AND detail_sha256 IS NULL`) != 1 {
		t.Fatal("no entry records an answer's status")
	}
	s := newSigner(t)
	s.checkpoint(t, e) // the ledger records every entry so far
	compare()
	rotateAway(t, e)
	k := e.enqueue("r2", "refund", 3)
	e.set(k[0], "succeeded", 1)
	if _, err := e.c.Cancel(ctx, k[1], alice, false); err != nil {
		t.Fatal(err)
	}
	s.checkpoint(t, e)
	compare()
	count := map[string]int{}
	for _, k := range kinds {
		count[k]++
	}
	if entries < 20 || anchors < 6 || count["entries"] < 2 || count["anchors"] < 1 || count["truncated"] < 1 {
		t.Fatalf("compared %d entries, %d anchors, records %v: want some of each", entries, anchors, count)
	}
}

// TestCheckpointCatchesARewrite: a checkpoint verifies while nothing
// changed; a rewrite of a chain with every hash recomputed (the row's
// head, the ledger's records and chain included) passes audit verify, and
// verify --checkpoints reports it, naming the file, the ledger record and
// the chain. A checkpoint taken after the rewrite signs it (it verifies),
// the one before still fails.
func TestCheckpointCatchesARewrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := mixedHistory(t, e)
	s := newSigner(t)
	first := s.checkpoint(t, e)
	if first.Record == 0 || first.Records == 0 {
		t.Fatalf("first checkpoint %+v: want the ledger's records", first)
	}
	if v := s.verify(t, e); !v.OK || v.Verified != 1 {
		t.Fatalf("untouched: %+v", v)
	}

	storetest.RewriteChain(t, e.pool, k[1])
	verifiesClean(t, e, "after a rewrite with every hash recomputed")
	v := s.verify(t, e)
	if v.OK || v.Verified != 0 {
		t.Fatalf("after the rewrite: %+v", v)
	}
	named := false
	for _, p := range v.Problems {
		if p.File != filepath.Base(first.Path) || p.Record == 0 {
			t.Errorf("problem %+v: want the checkpoint file and a record", p)
		}
		named = named || p.Key == k[1]
	}
	if !named {
		t.Fatalf("the rewritten chain %s is not named: %+v", k[1], v.Problems)
	}

	second := s.checkpoint(t, e)
	v = s.verify(t, e)
	if v.OK || v.Verified != 1 || v.Checkpoints != 2 {
		t.Fatalf("with a checkpoint after the rewrite: %+v", v)
	}
	for _, p := range v.Problems {
		if p.File == filepath.Base(second.Path) {
			t.Fatalf("the checkpoint taken after the rewrite is blamed: %+v", p)
		}
	}
}

// TestCheckpointOutlivesRotation: a checkpoint taken before its entries
// were verified, anchored and truncated still verifies against the
// anchors that replaced them, and so does one taken between two turns; a
// rewrite afterwards of a chain whose entries are gone (its anchor, the
// ledger recomputed) is caught by the checkpoint that signed the anchor
// (the one before the anchoring vouches for what it saw: the entries,
// truncated since as the ledger records).
func TestCheckpointOutlivesRotation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := mixedHistory(t, e)
	s := newSigner(t)
	s.checkpoint(t, e)
	rotateAway(t, e)
	verifiesClean(t, e, "after the rotation")
	if v := s.verify(t, e); !v.OK {
		t.Fatalf("a checkpoint from before the rotation: %+v", v)
	}
	e.enqueue("r2", "charge", 2)
	second := s.checkpoint(t, e)
	rotateAway(t, e)
	// The second turn's sweep retired anchors of forgotten chains from an
	// anchors record the second checkpoint signed whole: it verifies all
	// the same, against the retirement.
	if n := e.count(`SELECT count(*) FROM drainer.audit_ledger WHERE kind = 'retired' AND from_id <= $1`, second.Record); n == 0 {
		t.Fatal("no anchors record the second checkpoint signed was retired from")
	}
	if v := s.verify(t, e); !v.OK || v.Verified != 2 {
		t.Fatalf("two checkpoints, two turns: %+v", v)
	}

	storetest.RewriteChain(t, e.pool, k[1]) // only its anchor is left
	verifiesClean(t, e, "after the anchor's rewrite")
	v := s.verify(t, e)
	if v.OK || v.Verified != 1 {
		t.Fatalf("after the anchor's rewrite: %+v", v)
	}
	named := false
	for _, p := range v.Problems {
		if p.File != filepath.Base(second.Path) {
			t.Errorf("problem %+v: want the second checkpoint's", p)
		}
		named = named || p.Key == k[1]
	}
	if !named {
		t.Fatalf("the chain whose anchor was rewritten (%s) is not named: %+v", k[1], v.Problems)
	}
}

// TestCheckpointRefusesBadKeysAndFiles: a key file others can read, one
// that is not PEM, or holds another kind of key, is refused with a message
// naming the file and never its content; a checkpoint file edited after it
// was signed, or signed by another key, is reported, and so is an
// unreadable one.
func TestCheckpointRefusesBadKeysAndFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyFile, _ := writeKeys(t, dir)
	secret, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(secret)
	loose := filepath.Join(dir, "loose.key")
	if err := os.WriteFile(loose, secret, 0o640); err != nil {
		t.Fatal(err)
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalPKCS8PrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	ecFile := filepath.Join(dir, "ec.key")
	if err := os.WriteFile(ecFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.key")
	if err := os.WriteFile(junk, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ file, want string }{
		{loose, "readable by group or others (mode 0640): chmod 600"},
		{ecFile, "not an Ed25519 key"},
		{junk, "no PEM block"},
		{filepath.Join(dir, "absent.key"), "no such file"},
	} {
		_, err := LoadSigningKey(c.file)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), filepath.Base(c.file)) {
			t.Errorf("LoadSigningKey(%s) = %v, want an error naming it and saying %q", filepath.Base(c.file), err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), "BEGIN") || bytes.Contains([]byte(err.Error()), block.Bytes[len(block.Bytes)-8:])) {
			t.Errorf("LoadSigningKey(%s): the error shows key material: %v", c.file, err)
		}
	}
	if _, err := LoadPublicKey(keyFile); err == nil || !strings.Contains(err.Error(), `want "PUBLIC KEY"`) {
		t.Errorf("a private key given as the public key: %v", err)
	}

	e := newEnv(t)
	e.enqueue("r1", "charge", 2)
	s := newSigner(t)
	r := s.checkpoint(t, e)
	b, err := os.ReadFile(r.Path)
	if err != nil {
		t.Fatal(err)
	}
	// Another checkpoint file: the head moved back by one record.
	forged := bytes.Replace(b, []byte(`"record": `), []byte(`"record": 1`), 1)
	if bytes.Equal(forged, b) {
		t.Fatal("the checkpoint file has no head record")
	}
	if err := os.WriteFile(filepath.Join(s.dir, "forged.json"), forged, 0o644); err != nil {
		t.Fatal(err)
	}
	other := newSigner(t)
	other.dir = s.dir
	other.checkpoint(t, e)
	if err := os.WriteFile(filepath.Join(s.dir, "broken.json"), []byte(`{"format": "x"`), 0o644); err != nil {
		t.Fatal(err)
	}
	v := s.verify(t, e)
	got := map[string]string{}
	for _, p := range v.Problems {
		got[p.File] = p.Problem
	}
	if v.OK || v.Checkpoints != 4 || v.Verified != 1 || len(got) != 3 ||
		!strings.Contains(got["forged.json"], "the signature does not verify: the file was changed after it was signed") ||
		!strings.Contains(got["broken.json"], "not a checkpoint") {
		t.Fatalf("verification = %+v", v)
	}
	for f, p := range got {
		if f != "forged.json" && f != "broken.json" && !strings.Contains(p, "signed by key") {
			t.Fatalf("the checkpoint signed by another key: %s: %s", f, p)
		}
	}
}

// TestCheckpointSignsAndReportsABrokenAudit: a checkpoint covers the
// ledger records since the previous one, each checked; one that no longer
// holds (an anchor edited after the rotation recorded it) is reported with
// the checkpoint, which is written all the same; verify --checkpoints
// blames that checkpoint, not the one before the anchoring.
func TestCheckpointSignsAndReportsABrokenAudit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := mixedHistory(t, e)
	s := newSigner(t)
	if r := s.checkpoint(t, e); len(r.Problems) != 0 {
		t.Fatalf("first checkpoint: %v", r.Problems)
	}
	rotateAway(t, e)
	e.exec(`UPDATE drainer.audit_anchors SET status = 'succeeded' WHERE key = $1`, k[2])
	r := s.checkpoint(t, e)
	if len(r.Problems) != 1 || !strings.Contains(r.Problems[0], k[2]+": record ") || !strings.Contains(r.Problems[0], "does not match its hash (edited)") {
		t.Fatalf("checkpoint after an anchor was edited: %+v", r)
	}
	if _, err := os.Stat(r.Path); err != nil {
		t.Fatalf("the checkpoint was not written: %v", err)
	}
	// The first checkpoint came before the anchors' record: it verifies.
	v := s.verify(t, e)
	if v.OK || v.Verified != 1 || v.Checkpoints != 2 || len(v.Problems) != 1 || v.Problems[0].File != filepath.Base(r.Path) {
		t.Fatalf("verify: %+v", v)
	}
}

// TestCheckpointKeepsTheEvidenceARetirementCannotHide: an anchor version
// that records a problem (an entry edited before its generation was
// anchored) is listed in the checkpoint that signs its record, whether the
// record is signed whole or after a retirement of some of its versions
// (then only the retired record's check reads them). Removing it and
// appending a retired record that covers the removal, hashes and the
// ledger's chain right, passes every digest; the checkpoint still tells,
// naming the chain.
func TestCheckpointKeepsTheEvidenceARetirementCannotHide(t *testing.T) {
	t.Parallel()
	for _, retiredFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("retired_first=%v", retiredFirst), func(t *testing.T) {
			t.Parallel()
			evidenceCannotBeHidden(t, retiredFirst)
		})
	}
}

func evidenceCannotBeHidden(t *testing.T, retiredFirst bool) {
	e := newEnv(t)
	k := mixedHistory(t, e)
	storetest.TamperEdit(t, e.pool, k[0])
	rotateAway(t, e)
	if retiredFirst {
		// A second turn's sweep retires the forgotten chains (the
		// route's pause) of the record that holds the problem.
		e.enqueue("r2", "charge", 1)
		rotateAway(t, e)
		if n := e.count(`SELECT count(*) FROM drainer.audit_ledger r
		     WHERE r.kind = 'retired' AND r.from_id = (SELECT record FROM drainer.audit_anchors WHERE key = $1)`, k[0]); n == 0 {
			t.Fatal("no retirement from the anchors record that holds the problem")
		}
	}
	s := newSigner(t)
	r := s.checkpoint(t, e)
	doc, err := ReadCheckpoint(r.Path, s.pub)
	if err != nil {
		t.Fatal(err)
	}
	var evidence []CheckpointEvidence
	for _, rec := range doc.Records {
		evidence = append(evidence, rec.Evidence...)
	}
	if !slices.ContainsFunc(evidence, func(ev CheckpointEvidence) bool { return ev.Key == k[0] }) {
		t.Fatalf("the checkpoint lists no anchor version of %s, which records a problem: %+v", k[0], evidence)
	}
	if v := s.verify(t, e); !v.OK {
		t.Fatalf("before the removal: %+v", v)
	}
	e.exec(`DO $$
	DECLARE
	    v_rec   bigint;
	    v_b     integer;
	    v_items bigint;
	    v_vec   bytea;
	    l       record;
	BEGIN
	    SELECT v.record INTO v_rec
	      FROM (SELECT record, problem, key FROM drainer.audit_anchors
	            UNION ALL SELECT record, problem, key FROM drainer.audit_anchor_history) v
	     WHERE v.key = '` + k[0] + `' AND v.problem IS NOT NULL;
	    DELETE FROM drainer.audit_anchors WHERE key = '` + k[0] + `' AND problem IS NOT NULL;
	    DELETE FROM drainer.audit_anchor_history WHERE key = '` + k[0] + `' AND problem IS NOT NULL;
	    SELECT * INTO l FROM drainer.audit_ledger WHERE n = v_rec;
	    v_b := drainer.audit_buckets(l.items - 1);
	    SELECT v.items, v.vector INTO v_items, v_vec FROM drainer.audit_anchors_vector(v_rec, v_b) v;
	    PERFORM drainer.audit_ledger_append(drainer.audit_ledger_next(), 'retired', l.epoch, l.part, v_rec, l.upto_id,
	                                        v_items, v_b, v_vec);
	END $$`)
	v := s.verify(t, e)
	named := false
	for _, p := range v.Problems {
		named = named || (p.Key == k[0] && strings.Contains(p.Problem, "recorded a problem"))
	}
	if v.OK || !named {
		t.Fatalf("after the evidence of %s was removed under a forged retired record: %+v", k[0], v)
	}
}

// TestCheckpointNamesTheChainBehindAnEarlierRecomputedRecord: a rewrite
// that recomputes the whole ledger from today's state changes an early
// anchors record too, once anchors it recorded were retired (legitimately)
// since: verify --checkpoints still names the chain rewritten, in the
// later record that covered it; before, it looked at the first record that
// differed only, and named that record's buckets, never the chain.
func TestCheckpointNamesTheChainBehindAnEarlierRecomputedRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mixedHistory(t, e)
	s := newSigner(t)
	rotateAway(t, e)
	later := e.enqueue("r2", "charge", 2)
	rotateAway(t, e)
	if n := e.count(`SELECT count(*) FROM drainer.audit_ledger WHERE kind = 'retired'`); n == 0 {
		t.Fatal("setup: no anchors were retired")
	}
	signed := s.checkpoint(t, e)
	if v := s.verify(t, e); !v.OK {
		t.Fatalf("untouched: %+v", v)
	}
	storetest.RewriteChain(t, e.pool, later[0])
	v := s.verify(t, e)
	if v.OK {
		t.Fatalf("after the rewrite: %+v", v)
	}
	named := false
	for _, p := range v.Problems {
		if p.File != filepath.Base(signed.Path) {
			t.Errorf("problem %+v: want the checkpoint's", p)
		}
		named = named || p.Key == later[0]
	}
	if !named {
		t.Fatalf("the rewritten chain %s is not named: %+v", later[0], v.Problems)
	}
}
