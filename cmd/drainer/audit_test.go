package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/store/storetest"
)

func TestAuditVerifyCommand(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	k := d.enqueue("run-1", "charge_card", 2)
	d.set(k[0], "succeeded", 1)
	code, out, errb := d.run("audit", "verify")
	want(t, code, errb, 0)
	if strings.TrimSpace(out) != "audit: 3 entries in 2 chains verified" {
		t.Fatalf("verify: %q", out)
	}
	d.exec(`UPDATE drainer.audit SET actor = 'mallory' WHERE id = 1`)
	code, out, errb = d.run("audit", "verify")
	want(t, code, errb, 1, "1 broken link(s)")
	if !strings.Contains(out, "edited") || !strings.HasPrefix(strings.Split(out, "\n")[1], "1 ") {
		t.Fatalf("verify output:\n%s", out)
	}
	code, out, _ = d.run("audit", "verify", "--output", "json")
	var v map[string]any
	decode(t, out, &v)
	if code != 1 || v["ok"] != false || len(v["broken"].([]any)) != 1 {
		t.Fatalf("verify json = %v (exit %d)", v, code)
	}
}

// TestAuditCheckpointCommand: checkpoint signs the audit's head into DIR
// and verify --checkpoints proves it; a rewrite of a chain with every hash
// recomputed passes plain verify and fails verify --checkpoints (exit 1,
// naming the checkpoint file and the chain); a key file others can read,
// a missing flag or a half pair of flags is a usage error (exit 2).
func TestAuditCheckpointCommand(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	k := d.enqueue("run-1", "charge_card", 2)
	d.set(k[0], "succeeded", 1)
	dir, out := t.TempDir(), t.TempDir()
	keyFile, pubFile := writeAuditKeys(t, dir)

	code, stdout, errb := d.run("audit", "checkpoint", "--key-file", keyFile, "--out", out)
	want(t, code, errb, 0)
	if !strings.HasPrefix(stdout, "checkpoint: ledger record 1 (") || !strings.Contains(stdout, "signed into "+out+"/audit-checkpoint-000000000001-") {
		t.Fatalf("checkpoint: %q", stdout)
	}
	files, err := filepath.Glob(filepath.Join(out, "*.json"))
	if err != nil || len(files) != 1 {
		t.Fatalf("checkpoint files %v (%v), want one", files, err)
	}
	code, stdout, errb = d.run("audit", "verify", "--checkpoints", out, "--public-key", pubFile)
	want(t, code, errb, 0)
	if stdout != "audit: 3 entries in 2 chains verified\ncheckpoints: 1 of 1 verified\n" {
		t.Fatalf("verify: %q", stdout)
	}

	storetest.RewriteChain(t, d.pool, k[0])
	code, _, errb = d.run("audit", "verify")
	want(t, code, errb, 0)
	code, stdout, errb = d.run("audit", "verify", "--checkpoints", out, "--public-key", pubFile)
	want(t, code, errb, 1, "1 of 1 checkpoint(s) in "+out+" no longer verify")
	if !strings.Contains(stdout, filepath.Base(files[0])) || !strings.Contains(stdout, k[0]) || !strings.Contains(stdout, "no longer extends it") {
		t.Fatalf("verify after a rewrite:\n%s", stdout)
	}
	code, stdout, _ = d.run("audit", "verify", "--checkpoints", out, "--public-key", pubFile, "--output", "json")
	var v struct {
		OK          bool `json:"ok"`
		Checkpoints struct {
			OK       bool `json:"ok"`
			Problems []struct {
				File, Key string
				Record    int64
			} `json:"problems"`
		} `json:"checkpoints"`
	}
	decode(t, stdout, &v)
	if code != 1 || !v.OK || v.Checkpoints.OK || len(v.Checkpoints.Problems) == 0 || v.Checkpoints.Problems[0].Record != 1 {
		t.Fatalf("verify json = %+v (exit %d)", v, code)
	}

	if err := os.Chmod(keyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errb = d.run("audit", "checkpoint", "--key-file", keyFile, "--out", out)
	want(t, code, errb, 2, "--key-file: key file "+keyFile+" is readable by group or others (mode 0644): chmod 600 "+keyFile)
	code, _, errb = d.run("audit", "checkpoint", "--key-file", keyFile)
	want(t, code, errb, 2, "checkpoint needs --key-file F and --out DIR")
	if err := os.Chmod(keyFile, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errb = d.run("audit", "checkpoint", "--key-file", keyFile, "--out", out+"/missing")
	want(t, code, errb, 2, "--out: "+out+"/missing does not exist: create the directory first")
	code, _, errb = d.run("audit", "checkpoint", "--key-file", keyFile, "--out", pubFile)
	want(t, code, errb, 2, "--out: "+pubFile+" is a file, not a directory")
	code, _, errb = d.run("audit", "verify", "--checkpoints", out)
	want(t, code, errb, 2, "--checkpoints and --public-key go together")
	code, _, errb = d.run("audit", "verify", "--checkpoints", out, "--public-key", keyFile)
	want(t, code, errb, 2, `want "PUBLIC KEY"`)
}

// writeAuditKeys writes an Ed25519 key pair into dir as openssl does
// (PKCS #8 private key, mode 600; PKIX public key).
func writeAuditKeys(t *testing.T, dir string) (keyFile, pubFile string) {
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
