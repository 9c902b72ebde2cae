package ops

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
)

// CheckpointProblem is something a checkpoint says that the audit no
// longer does, or a checkpoint file that cannot be trusted.
type CheckpointProblem struct {
	// File is the checkpoint file (its base name) the problem breaks.
	File string `json:"file"`
	// Record is the ledger record at fault (0: none).
	Record int64 `json:"record"`
	// Key is the chain at fault: an entry's or anchor's key, or
	// "ledger" for the ledger's own chain.
	Key     string `json:"key"`
	Problem string `json:"problem"`
}

func (p CheckpointProblem) String() string {
	s := p.Problem
	if p.Key != "" && p.Key != "ledger" {
		s = p.Key + ": " + s
	}
	if p.File != "" {
		s = p.File + ": " + s
	}
	return s
}

// CheckpointVerification is the result of VerifyCheckpoints.
type CheckpointVerification struct {
	OK bool `json:"ok"`
	// Checkpoints counts the files read; Verified those that verified
	// whole.
	Checkpoints int                 `json:"checkpoints"`
	Verified    int                 `json:"verified"`
	Problems    []CheckpointProblem `json:"problems"`
}

// VerifyCheckpoints proves that every checkpoint in dir, signed by pub, is
// still a prefix of the audit now: the ledger record it signed is still
// there with the hash it signed (so no record up to it was rewritten,
// removed or inserted, recomputed hashes included), and every record up
// to it still covers what it covered when it was written (the entries of
// a generation still there, digested again here, entry by entry from
// their content; the anchors of an anchoring). A generation truncated
// since stands for its entries through its anchors, which the ledger
// holds. Each problem names the checkpoint file, the record and, where
// the buckets of the record tell, the chains.
func (c *Client) VerifyCheckpoints(ctx context.Context, dir string, pub ed25519.PublicKey) (*CheckpointVerification, error) {
	files, err := checkpointFiles(dir)
	if err != nil {
		return nil, fmt.Errorf("verify checkpoints: %w", err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("verify checkpoints: %s holds no checkpoint file (*.json)", dir)
	}
	out := &CheckpointVerification{Checkpoints: len(files), Problems: []CheckpointProblem{}}
	type signed struct {
		file string
		doc  *Checkpoint
	}
	var docs []signed
	for _, f := range files {
		doc, err := ReadCheckpoint(f, pub)
		if err != nil {
			out.Problems = append(out.Problems, CheckpointProblem{File: filepath.Base(f), Key: "ledger",
				Problem: strings.TrimPrefix(err.Error(), f+": ")})
			continue
		}
		docs = append(docs, signed{filepath.Base(f), doc})
	}
	sort.SliceStable(docs, func(i, j int) bool { return docs[i].doc.Head.Record < docs[j].doc.Head.Record })
	// What the checkpoints signed of each record.
	signedRec := map[int64]CheckpointRecord{}
	for _, d := range docs {
		for _, r := range d.doc.Records {
			signedRec[r.N] = r
		}
	}

	err = c.readOnly(ctx, func(tx pgx.Tx) error {
		a, err := c.readAudit(ctx, tx, 1)
		if err != nil {
			return err
		}
		checked := map[int64][]CheckpointProblem{}
		for _, d := range docs {
			before := len(out.Problems)
			blame := func(ps []CheckpointProblem) {
				for _, p := range ps {
					p.File = d.file
					out.Problems = append(out.Problems, p)
				}
			}
			head := d.doc.Head.Record
			switch {
			case d.doc.Schema != c.Schema():
				blame([]CheckpointProblem{{Key: "ledger", Problem: fmt.Sprintf("taken of schema %s, not %s", d.doc.Schema, c.Schema())}})
			case head == 0:
			case head > int64(len(a.records)):
				blame([]CheckpointProblem{{Record: head, Key: "ledger", Problem: fmt.Sprintf(
					"the ledger ends at record %d: records up to %d, which it signed, were removed", len(a.records), head)}})
			case hex.EncodeToString(a.records[head-1].Hash) != d.doc.Head.Hash || (a.chainBreak() > 0 && a.chainBreak() <= head):
				blame(a.rewritten(ctx, tx, head, signedRec))
			default:
				ps, err := a.checkUpTo(ctx, tx, head, checked, d.doc.Records)
				if err != nil {
					return err
				}
				blame(ps)
			}
			if len(out.Problems) == before {
				out.Verified++
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("verify checkpoints: %w", err)
	}
	out.OK = len(out.Problems) == 0
	return out, nil
}

// checkUpTo checks every record up to head (each once across the
// checkpoints: checked), and the evidence a checkpoint's records list.
func (a *auditView) checkUpTo(ctx context.Context, tx pgx.Tx, head int64, checked map[int64][]CheckpointProblem, records []CheckpointRecord) ([]CheckpointProblem, error) {
	var out []CheckpointProblem
	for n := int64(1); n <= head; n++ {
		ps, ok := checked[n]
		if !ok {
			ps = a.check(ctx, tx, &a.records[n-1])
			checked[n] = ps
		}
		out = append(out, ps...)
	}
	gone, err := a.c.evidenceGone(ctx, tx, records)
	return append(out, gone...), err
}

// evidenceGone reports each anchor version that records a problem, signed
// in records, that is no longer there as signed: the sweep of forgotten
// chains never removes one, so a retired record that covers its removal
// was written by someone else.
func (c *Client) evidenceGone(ctx context.Context, tx pgx.Tx, records []CheckpointRecord) ([]CheckpointProblem, error) {
	var vids []int64
	for _, r := range records {
		for _, ev := range r.Evidence {
			vids = append(vids, ev.Vid)
		}
	}
	if len(vids) == 0 {
		return nil, nil
	}
	there, err := c.st.AnchorVersionsByVid(ctx, tx, vids)
	if err != nil {
		return nil, err
	}
	var out []CheckpointProblem
	for _, r := range records {
		for _, ev := range r.Evidence {
			if x, ok := there[ev.Vid]; !ok || x.Key != ev.Key || hex.EncodeToString(x.RowHash) != ev.RowHash {
				out = append(out, CheckpointProblem{Record: r.N, Key: ev.Key, Problem: fmt.Sprintf(
					"record %d: anchor version %d, which recorded a problem when this was signed, is gone or changed", r.N, ev.Vid)})
			}
		}
	}
	return out, nil
}

// auditView is the ledger and the generations as one snapshot sees them.
type auditView struct {
	c        *Client
	records  []store.LedgerRecord
	gens     []store.AuditGeneration
	brk      int64 // the first record that breaks the chain (0: none)
	breakWhy string
	// evidence holds, by anchors record, its versions that record a
	// problem, as the last digest of the record's versions read them.
	evidence map[int64][]CheckpointEvidence
}

func (c *Client) readAudit(ctx context.Context, tx pgx.Tx, vectorsFrom int64) (*auditView, error) {
	recs, err := c.st.AuditLedger(ctx, tx, vectorsFrom)
	if err != nil {
		return nil, err
	}
	gens, err := c.st.AuditGenerations(ctx, tx)
	if err != nil {
		return nil, err
	}
	a := &auditView{c: c, records: recs, gens: gens, evidence: map[int64][]CheckpointEvidence{}}
	var prev []byte
	for i := range recs {
		r := &recs[i]
		switch {
		case r.N != int64(i)+1:
			a.brk, a.breakWhy = int64(i)+1, fmt.Sprintf("record %d is missing (the next is %d)", i+1, r.N)
		case !bytes.Equal(r.Prev, prev):
			a.brk, a.breakWhy = r.N, "does not link to the record before it"
		case !bytes.Equal(LedgerHash(r), r.Hash):
			a.brk, a.breakWhy = r.N, "does not match its hash (edited)"
		case r.Vector != nil && !bytes.Equal(sha256Sum(r.Vector), r.Digest):
			a.brk, a.breakWhy = r.N, "its vector does not match its digest (edited)"
		}
		if a.brk > 0 {
			break
		}
		prev = r.Hash
	}
	return a, nil
}

func (a *auditView) chainBreak() int64 { return a.brk }

// rewritten explains why the ledger no longer extends a checkpoint whose
// head is head: the first record whose hash differs from what the
// checkpoint signed (or the chain's break), and, for every record whose
// content differs from what was signed (its digest, not merely its hash:
// a rewrite recomputes the hash of every record after the one it
// changed), the chains in the buckets that differ now, from the record's
// vector as signed. A rewrite made to hide one chain recomputes the
// records before it from today's state too: only looking at every one of
// them names the chain it hid.
func (a *auditView) rewritten(ctx context.Context, tx pgx.Tx, head int64, signedRec map[int64]CheckpointRecord) []CheckpointProblem {
	first := head
	for n := int64(1); n <= head; n++ {
		if s, ok := signedRec[n]; ok && s.Hash != hex.EncodeToString(a.records[n-1].Hash) {
			first = n
			break
		}
	}
	if b := a.chainBreak(); b > 0 && b < first {
		first = b
	}
	out := []CheckpointProblem{{Record: first, Key: "ledger", Problem: fmt.Sprintf(
		"the ledger no longer extends it: record %d (%s) is not the one it signed (rewritten, hashes recomputed)", first, describe(&a.records[first-1]))}}
	for n := first; n <= head; n++ {
		s, ok := signedRec[n]
		if !ok || s.Hash == hex.EncodeToString(a.records[n-1].Hash) || s.Digest == hex.EncodeToString(a.records[n-1].Digest) {
			continue // as signed, or only linked anew
		}
		out = append(out, a.differingChains(ctx, tx, &a.records[n-1], s)...)
	}
	return out
}

// differingChains names, from record r's vector as the checkpoint signed
// it (s), the chains in the buckets that read otherwise now.
func (a *auditView) differingChains(ctx context.Context, tx pgx.Tx, r *store.LedgerRecord, s CheckpointRecord) []CheckpointProblem {
	if s.Vector == "" {
		return nil
	}
	was, err := base64.StdEncoding.DecodeString(s.Vector)
	if err != nil {
		return nil
	}
	now, _, err := a.digest(ctx, tx, r, s.Buckets)
	if err != nil || now == nil {
		return nil
	}
	differ := differingBuckets(was, now.vector())
	if now, _, err = a.digest(ctx, tx, r, s.Buckets, differ...); err != nil || now == nil {
		return nil
	}
	var out []CheckpointProblem
	for _, b := range differ {
		keys := slices.Sorted(maps.Keys(now.keys[b]))
		if len(keys) == 0 {
			out = append(out, CheckpointProblem{Record: r.N, Key: "ledger", Problem: fmt.Sprintf(
				"record %d: what it recorded in bucket %d is gone", r.N, b)})
		}
		for _, k := range keys {
			out = append(out, CheckpointProblem{Record: r.N, Key: k, Problem: fmt.Sprintf(
				"record %d, bucket %d: this chain, or another in the bucket, no longer reads as signed", r.N, b)})
		}
	}
	return out
}

// check digests record r again from what it covers, where that is still
// there, and returns what no longer matches it.
func (a *auditView) check(ctx context.Context, tx pgx.Tx, r *store.LedgerRecord) []CheckpointProblem {
	bad := func(key, format string, args ...any) CheckpointProblem {
		return CheckpointProblem{Record: r.N, Key: key, Problem: fmt.Sprintf("record %d (%s): ", r.N, describe(r)) + fmt.Sprintf(format, args...)}
	}
	if r.Kind == "retired" {
		if of := deref64(r.FromID); of <= 0 || of >= r.N || a.records[of-1].Kind != "anchors" {
			return []CheckpointProblem{bad("ledger", "it names record %d, which is no anchors record before it", of)}
		}
	}
	if _, latest := a.anchorsOf(r); !latest && (r.Kind == "anchors" || r.Kind == "retired") {
		return nil // a later retirement tells what is left of the record's anchors
	}
	now, edited, err := a.digest(ctx, tx, r, r.Buckets)
	if err != nil {
		return []CheckpointProblem{bad("ledger", "%v", err)}
	}
	if now == nil {
		if r.Kind == "entries" && !a.settled(r) {
			return []CheckpointProblem{bad("ledger", "its generation's entries are gone, and the ledger holds no truncation of it")}
		}
		return nil
	}
	var out []CheckpointProblem
	for _, e := range edited {
		out = append(out, bad(e.key, "%s %d does not match its hash (edited)", e.what, e.id))
	}
	vec := now.vector()
	if now.items == r.Items && bytes.Equal(sha256Sum(vec), r.Digest) {
		return out
	}
	recorded := r.Vector
	if recorded == nil || !bytes.Equal(sha256Sum(recorded), r.Digest) {
		return append(out, bad("ledger", "what it covers no longer digests as recorded"))
	}
	differ := differingBuckets(recorded, vec)
	if now, _, err = a.digest(ctx, tx, r, r.Buckets, differ...); err != nil || now == nil {
		return append(out, bad("ledger", "what it covers no longer digests as recorded"))
	}
	for _, b := range differ {
		if len(now.keys[b]) == 0 {
			out = append(out, bad("ledger", "what it recorded in bucket %d is gone", b))
		}
		for _, k := range slices.Sorted(maps.Keys(now.keys[b])) {
			out = append(out, bad(k, "bucket %d no longer matches: this chain, or another in the bucket, was rewritten (hashes recomputed) or removed", b))
		}
	}
	return out
}

type editedItem struct {
	what, key string
	id        int64
}

// digest digests again what record r covers, into buckets buckets: the
// entries of its generation's ids (each entry's hash recomputed from its
// content first: those that do not match are returned) or the anchor
// versions it holds, remembering the keys of the buckets keep names (read
// again for them, once a first pass found them differing). nil: nothing
// to digest (a truncation, or a generation no longer there).
func (a *auditView) digest(ctx context.Context, tx pgx.Tx, r *store.LedgerRecord, buckets int32, keep ...int32) (*vectorBuilder, []editedItem, error) {
	var edited []editedItem
	switch r.Kind {
	case "entries":
		if r.Part == nil || r.FromID == nil || r.UptoID == nil || a.settled(r) || !a.live(r) {
			return nil, nil, nil
		}
		v := newVectorBuilder(buckets, keep...)
		err := a.c.st.EachAuditEntry(ctx, tx, *r.Part, *r.FromID, *r.UptoID, func(e *store.RawAuditEntry) error {
			if !bytes.Equal(EntryHash(e), e.Hash) {
				edited = append(edited, editedItem{"entry", e.Key, e.ID})
			}
			v.add(e.Key, e.ID, e.Hash)
			return nil
		})
		return v, edited, err
	case "anchors", "retired":
		of, _ := a.anchorsOf(r)
		v := newVectorBuilder(buckets, keep...)
		var evidence []CheckpointEvidence
		err := a.c.st.EachAnchorVersion(ctx, tx, of, func(x *store.AnchorVersion) error {
			if !bytes.Equal(AnchorHash(x), x.RowHash) {
				edited = append(edited, editedItem{"anchor", x.Key, x.Vid})
			}
			evidence = appendEvidence(evidence, x)
			v.add(x.Key, x.Vid, x.RowHash)
			return nil
		})
		if err == nil {
			a.evidence[of] = evidence
		}
		return v, edited, err
	}
	return nil, nil, nil
}

// anchorsOf says which anchors record's versions r digests (an anchors
// record its own, a retired record those left of the one it names), and
// whether r is the latest record of them: once versions of forgotten
// chains left an anchors record (audit_retire_anchors), what is left is
// digested against the latest retirement only.
func (a *auditView) anchorsOf(r *store.LedgerRecord) (int64, bool) {
	of := r.N
	if r.Kind == "retired" {
		if r.FromID == nil {
			return 0, false
		}
		of = *r.FromID
	}
	for i := range a.records {
		t := &a.records[i]
		if t.N > r.N && t.Kind == "retired" && t.FromID != nil && *t.FromID == of {
			return of, false
		}
	}
	return of, true
}

// live says whether r's generation is still there (not truncated).
func (a *auditView) live(r *store.LedgerRecord) bool {
	for _, g := range a.gens {
		if !g.Ready && g.Epoch != nil && r.Epoch != nil && *g.Epoch == *r.Epoch && r.Part != nil && g.Part == *r.Part {
			return true
		}
	}
	return false
}

// settled says whether r's entries are beyond digesting again, and need
// not be: the ledger records their generation's truncation, or the
// generation is anchored (the anchoring verified them) and empty (a
// truncation committed after this snapshot was taken).
func (a *auditView) settled(r *store.LedgerRecord) bool {
	if r.Epoch == nil {
		return false
	}
	anchored := false
	for i := range a.records {
		t := &a.records[i]
		if t.N <= r.N || t.Epoch == nil || *t.Epoch != *r.Epoch {
			continue
		}
		if t.Kind == "truncated" {
			return true
		}
		if t.Kind == "anchors" && t.UptoID != nil && r.UptoID != nil && *t.UptoID >= *r.UptoID {
			anchored = true
		}
	}
	if !anchored {
		return false
	}
	for _, g := range a.gens {
		if r.Part != nil && g.Part == *r.Part {
			return g.Empty
		}
	}
	return false
}

// describe says what a ledger record covers.
func describe(r *store.LedgerRecord) string {
	switch r.Kind {
	case "entries":
		return fmt.Sprintf("the entries of generation %s with ids %d to %d", i64(r.Epoch), deref64(r.FromID)+1, deref64(r.UptoID))
	case "anchors":
		if r.Epoch == nil {
			return "the anchors written before the ledger"
		}
		return fmt.Sprintf("the anchors of generation %s", i64(r.Epoch))
	case "retired":
		return fmt.Sprintf("the anchors of record %d left once forgotten chains' went", deref64(r.FromID))
	}
	return fmt.Sprintf("the truncation of generation %s", i64(r.Epoch))
}

func deref64(v *int64) int64 {
	if v == nil {
		return 0
	}
	return *v
}

func sha256Sum(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}
