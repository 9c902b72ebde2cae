package ops

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
)

// A checkpoint is a signed statement of the audit's ledger
// (docs/reference.md, "Audit checkpoints"): the ledger's last record and
// its hash, which covers every record before it (every range of entries
// recorded, every anchoring, every truncation), and the records since the
// previous checkpoint in the same directory, with their digests and
// bucket vectors, so that a later rewrite can be pinned to a record and
// the chains in it. A file is a few hundred bytes plus at most about
// 200 kB a record, whatever the number of chains.

// CheckpointFormat names the layout of a checkpoint file.
const CheckpointFormat = "drainer.audit.checkpoint/1"

// checkpointDomain goes before the signed document, so that a signature
// made by the same key for anything else never verifies as a checkpoint.
const checkpointDomain = "drainer audit checkpoint v1\n"

// Checkpoint is the content of a checkpoint file.
type Checkpoint struct {
	Format  string `json:"format"`
	Schema  string `json:"schema"`
	TakenAt string `json:"taken_at"`
	// Head is the ledger's last record when the checkpoint was taken.
	Head CheckpointHead `json:"head"`
	// Records are the ledger's records after the previous checkpoint's
	// head (all of them for the first checkpoint in a directory).
	Records []CheckpointRecord `json:"records"`
	// KeyID names the public key that verifies it: the first 16 hex
	// digits of its SHA-256.
	KeyID string `json:"key_id"`
	// Signature is the Ed25519 signature (base64) of checkpointDomain
	// followed by the document's compact JSON without the signature.
	Signature string `json:"signature,omitempty"`
}

// CheckpointHead is a ledger record and its hash (hex).
type CheckpointHead struct {
	Record int64  `json:"record"`
	Hash   string `json:"hash"`
}

// CheckpointRecord is a ledger record as the checkpoint saw it.
type CheckpointRecord struct {
	N       int64  `json:"n"`
	Kind    string `json:"kind"`
	Epoch   *int64 `json:"epoch,omitempty"`
	Part    *int16 `json:"part,omitempty"`
	FromID  *int64 `json:"from_id,omitempty"`
	UptoID  *int64 `json:"upto_id,omitempty"`
	Items   int64  `json:"items"`
	Buckets int32  `json:"buckets"`
	Digest  string `json:"digest,omitempty"`
	// Vector is the record's bucket vector (base64), while its entries
	// are still there to be digested again.
	Vector string `json:"vector,omitempty"`
	Hash   string `json:"hash"`
	// Evidence lists an anchors record's versions that record a problem.
	// The sweep of forgotten chains never removes one; verify checks that
	// each is still there as signed, whatever a later retired record says
	// of the record.
	Evidence []CheckpointEvidence `json:"evidence,omitempty"`
}

// CheckpointEvidence is an anchor version that records a problem: its
// vid, its chain and its row hash (hex).
type CheckpointEvidence struct {
	Vid     int64  `json:"vid"`
	Key     string `json:"key"`
	RowHash string `json:"row_hash"`
}

// keyID names a public key in checkpoints.
func keyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// signedBytes is what the signature covers.
func (c Checkpoint) signedBytes() ([]byte, error) {
	c.Signature = ""
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	return append([]byte(checkpointDomain), b...), nil
}

// sign signs c with key.
func (c *Checkpoint) sign(key ed25519.PrivateKey) error {
	c.KeyID = keyID(key.Public().(ed25519.PublicKey))
	b, err := c.signedBytes()
	if err != nil {
		return err
	}
	c.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(key, b))
	return nil
}

// ReadCheckpoint reads and checks a checkpoint file: its layout (no
// unknown field) and its signature by pub.
func ReadCheckpoint(path string, pub ed25519.PublicKey) (*Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	var c Checkpoint
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: not a checkpoint: %w", path, err)
	}
	if c.Format != CheckpointFormat {
		return nil, fmt.Errorf("%s: format %q, want %q", path, c.Format, CheckpointFormat)
	}
	sig, err := base64.StdEncoding.DecodeString(c.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, fmt.Errorf("%s: the signature is not an Ed25519 signature in base64", path)
	}
	b, err := c.signedBytes()
	if err != nil {
		return nil, err
	}
	if !ed25519.Verify(pub, b, sig) {
		if c.KeyID != keyID(pub) {
			return nil, fmt.Errorf("%s: signed by key %s, not by the public key given (%s)", path, c.KeyID, keyID(pub))
		}
		return nil, fmt.Errorf("%s: the signature does not verify: the file was changed after it was signed", path)
	}
	return &c, nil
}

// LoadSigningKey reads an Ed25519 private key from a PEM file holding it
// as PKCS #8 ("PRIVATE KEY", as `openssl genpkey -algorithm ed25519`
// writes it). The file must be readable by its owner only: a key others
// can read signs checkpoints for them too.
func LoadSigningKey(path string) (ed25519.PrivateKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("key file %s is readable by group or others (mode %04o): chmod 600 %s", path, perm, path)
	}
	block, err := readPEM(path, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("key file %s: not a PKCS #8 private key", path)
	}
	ed, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("key file %s: a %T, not an Ed25519 key (openssl genpkey -algorithm ed25519)", path, k)
	}
	return ed, nil
}

// LoadPublicKey reads an Ed25519 public key from a PEM file ("PUBLIC
// KEY", as `openssl pkey -pubout` writes it).
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	block, err := readPEM(path, "PUBLIC KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("public key file %s: not a public key", path)
	}
	ed, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("public key file %s: a %T, not an Ed25519 key", path, k)
	}
	return ed, nil
}

func readPEM(path, want string) (*pem.Block, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("key file %s: no PEM block (want %q)", path, want)
	}
	if block.Type != want {
		return nil, fmt.Errorf("key file %s: a PEM %q block, want %q", path, block.Type, want)
	}
	return block, nil
}

// CheckpointOptions say where a checkpoint goes and who signs it.
type CheckpointOptions struct {
	Dir string
	Key ed25519.PrivateKey
	// Wait bounds the wait for the transactions that were running when
	// the checkpoint began (an entry they write gets an id it covers);
	// zero: a minute.
	Wait time.Duration
}

// CheckpointResult is what Checkpoint wrote.
type CheckpointResult struct {
	Path    string `json:"path"`
	Record  int64  `json:"record"`
	Hash    string `json:"hash"`
	Records int    `json:"records"`
	// Problems are what the records it covers since the previous
	// checkpoint no longer hold (see drainer audit verify): it is signed
	// all the same, the ledger being what it is.
	Problems []string `json:"problems"`
}

// CheckpointDir checks that dir is a directory checkpoints can be
// written to and read from, saying what it is otherwise.
func CheckpointDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s does not exist: create the directory first", dir)
	case err != nil:
		return fmt.Errorf("%s: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("%s is a file, not a directory", dir)
	}
	return nil
}

// Checkpoint signs the audit's current head into a new file in o.Dir:
// every entry written so far goes into the ledger (once the transactions
// that could still write one with an earlier id have ended), the records
// since the previous checkpoint in o.Dir are checked (each digested again
// from what it covers, and the chain), and the ledger's last record is
// signed with them. What the check finds is returned (Problems) with the
// checkpoint, which is written all the same: refusing would leave the
// audit without any checkpoint for as long as a tampered generation is
// kept.
func (c *Client) Checkpoint(ctx context.Context, o CheckpointOptions) (*CheckpointResult, error) {
	if o.Key == nil {
		return nil, errors.New("checkpoint: no signing key")
	}
	if err := CheckpointDir(o.Dir); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	wait := o.Wait
	if wait <= 0 {
		wait = time.Minute
	}
	pub := o.Key.Public().(ed25519.PublicKey)
	var since int64
	if prev := newestCheckpoint(o.Dir, pub); prev != nil && prev.Schema == c.Schema() {
		since = prev.Head.Record
	}

	upto, running, err := c.st.AuditHorizon(ctx, c.db)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	deadline := time.Now().Add(wait)
	for {
		busy, err := c.st.TransactionsRunning(ctx, c.db, running)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		if !busy {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("checkpoint: transactions open since before it began still run after %s (one idle in a transaction?); nothing signed", wait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, _, err := c.st.ExtendAuditLedger(ctx, c.db, upto); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}

	doc := Checkpoint{Format: CheckpointFormat, Schema: c.Schema(), TakenAt: time.Now().UTC().Format(time.RFC3339Nano)}
	var problems []string
	err = c.readOnly(ctx, func(tx pgx.Tx) error {
		var err error
		problems, err = c.readSince(ctx, tx, since, &doc)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if err := doc.sign(o.Key); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	path, err := writeCheckpoint(o.Dir, &doc)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return &CheckpointResult{Path: path, Record: doc.Head.Record, Hash: doc.Head.Hash, Records: len(doc.Records), Problems: problems}, nil
}

// readSince reads the ledger's records after since into doc, with its
// head, and returns what they no longer hold (each record checked). An
// anchors record's evidence comes from the check that digested its
// versions (its own, or its latest retired record's, also after since),
// read again only when no check did.
func (c *Client) readSince(ctx context.Context, tx pgx.Tx, since int64, doc *Checkpoint) ([]string, error) {
	problems := []string{}
	a, err := c.readAudit(ctx, tx, since+1)
	if err != nil {
		return nil, err
	}
	if b := a.chainBreak(); b > 0 {
		problems = append(problems, fmt.Sprintf("ledger record %d: %s", b, a.breakWhy))
	}
	for i := range a.records {
		r := &a.records[i]
		if r.N <= since {
			continue
		}
		for _, p := range a.check(ctx, tx, r) {
			problems = append(problems, p.String())
		}
		doc.Records = append(doc.Records, recordOf(r))
	}
	for i := range doc.Records {
		rec := &doc.Records[i]
		if rec.Kind != "anchors" {
			continue
		}
		ev, read := a.evidence[rec.N]
		if !read {
			if ev, err = c.evidence(ctx, tx, rec.N); err != nil {
				return nil, err
			}
		}
		rec.Evidence = ev
	}
	if n := len(a.records); n > 0 {
		doc.Head = CheckpointHead{Record: a.records[n-1].N, Hash: hex.EncodeToString(a.records[n-1].Hash)}
	}
	return problems, nil
}

// evidence lists the versions of anchors record n that record a problem.
func (c *Client) evidence(ctx context.Context, tx pgx.Tx, n int64) ([]CheckpointEvidence, error) {
	var out []CheckpointEvidence
	err := c.st.EachAnchorVersion(ctx, tx, n, func(x *store.AnchorVersion) error {
		out = appendEvidence(out, x)
		return nil
	})
	return out, err
}

// appendEvidence appends x to evidence when x records a problem.
func appendEvidence(evidence []CheckpointEvidence, x *store.AnchorVersion) []CheckpointEvidence {
	if x.Problem == nil {
		return evidence
	}
	return append(evidence, CheckpointEvidence{Vid: x.Vid, Key: x.Key, RowHash: hex.EncodeToString(x.RowHash)})
}

func recordOf(r *store.LedgerRecord) CheckpointRecord {
	out := CheckpointRecord{N: r.N, Kind: r.Kind, Epoch: r.Epoch, Part: r.Part, FromID: r.FromID, UptoID: r.UptoID,
		Items: r.Items, Buckets: r.Buckets, Digest: hex.EncodeToString(r.Digest), Hash: hex.EncodeToString(r.Hash)}
	if r.Vector != nil {
		out.Vector = base64.StdEncoding.EncodeToString(r.Vector)
	}
	return out
}

// writeCheckpoint writes doc into dir under a name that sorts by record
// and time, through a temporary file renamed into place, so a reader
// never sees half a checkpoint.
func writeCheckpoint(dir string, doc *Checkpoint) (string, error) {
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("audit-checkpoint-%012d-%s.json", doc.Head.Record, time.Now().UTC().Format("20060102T150405.000000000Z"))
	tmp, err := os.CreateTemp(dir, ".audit-checkpoint-*.tmp")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	return path, nil
}

// checkpointFiles lists the checkpoint files of dir, in name order.
func checkpointFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// newestCheckpoint is the valid checkpoint of dir, signed by pub, with the
// latest head (nil: none); files that do not verify are left to verify to
// report.
func newestCheckpoint(dir string, pub ed25519.PublicKey) *Checkpoint {
	files, err := checkpointFiles(dir)
	if err != nil {
		return nil
	}
	var best *Checkpoint
	for _, f := range files {
		c, err := ReadCheckpoint(f, pub)
		if err == nil && (best == nil || c.Head.Record > best.Head.Record) {
			best = c
		}
	}
	return best
}
