package main

import (
	"crypto/ed25519"
	"fmt"
	"io"
	"time"

	"github.com/drainer-io/drainer/ops"
	"github.com/spf13/cobra"
)

func newAuditCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Work with the tamper-evident audit trail",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("audit needs a subcommand: verify or checkpoint")
		},
	}
	cmd.AddCommand(newAuditVerifyCmd(), newAuditCheckpointCmd())
	return cmd
}

func newAuditVerifyCmd() *cobra.Command {
	var o opFlags
	var limit int
	var dir, pubFile string
	cmd := &cobra.Command{
		Use:   "verify [--limit N] [--checkpoints DIR --public-key F]",
		Short: "Check every hash chain of the audit trail, and signed checkpoints",
		Long: `Check every per-key hash chain of the audit trail, and the ledger that
chains the audit's records and anchors. Exit 0 printing "audit: N entries
in M chains verified" when all verify; exit 1 listing the first --limit
problems (id, key, problem): an entry whose content no longer matches its
hash was edited; an entry whose link does not match the entry before it
follows one that was removed or inserted; a row or tombstone whose status
its chain does not record was changed with the audit bypassed; an anchor
keeps for good what the rotation found wrong in the entries it replaced.

With --checkpoints DIR --public-key F, also prove that every checkpoint
in DIR (drainer audit checkpoint) verifies with the Ed25519 public key in
F (PEM, "PUBLIC KEY") and is still a prefix of the audit now: a rewrite by
anyone who can write the database, recomputed hashes included, is
reported with the checkpoint file, the ledger record and the chains it
touched; exit 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 {
				return usagef("%s: must be positive, got %d", flagRef(cmd, "limit"), limit)
			}
			if (dir == "") != (pubFile == "") {
				return usagef("--checkpoints and --public-key go together")
			}
			var pub ed25519.PublicKey
			if pubFile != "" {
				var err error
				if pub, err = ops.LoadPublicKey(pubFile); err != nil {
					return usagef("--public-key: %v", err)
				}
			}
			c, done, err := o.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			v, err := c.VerifyAudit(cmd.Context(), limit)
			if err != nil {
				return err
			}
			if pub != nil {
				if v.Checkpoints, err = c.VerifyCheckpoints(cmd.Context(), dir, pub); err != nil {
					return err
				}
			}
			w := cmd.OutOrStdout()
			if o.json() {
				if err := writeJSON(w, v); err != nil {
					return err
				}
			} else {
				printAuditVerification(w, v)
			}
			switch {
			case !v.OK:
				return fmt.Errorf("audit: %d broken link(s) in %d entries (first listed above)", len(v.Broken), v.Entries)
			case v.Checkpoints != nil && !v.Checkpoints.OK:
				return fmt.Errorf("audit: %d of %d checkpoint(s) in %s no longer verify (listed above)",
					v.Checkpoints.Checkpoints-v.Checkpoints.Verified, v.Checkpoints.Checkpoints, dir)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&limit, "limit", ops.DefaultVerifyLimit, "report at most N problems")
	cmd.Flags().StringVar(&dir, "checkpoints", "", "also verify the signed checkpoints in directory DIR")
	cmd.Flags().StringVar(&pubFile, "public-key", "", "the Ed25519 public key (PEM) the checkpoints are signed with")
	addOpFlags(cmd, &o)
	return cmd
}

// printAuditVerification prints what audit verify found: the count, or the
// broken links; then the checkpoints' verdict, or their problems.
func printAuditVerification(w io.Writer, v *ops.Verification) {
	if v.OK {
		fmt.Fprintf(w, "audit: %d entries in %d chains verified\n", v.Entries, v.Chains)
	} else {
		t := newTable(w, "ID", "KEY", "PROBLEM")
		for _, b := range v.Broken {
			t.row(i64(b.ID), b.Key, b.Problem)
		}
		_ = t.flush()
	}
	cp := v.Checkpoints
	switch {
	case cp == nil:
	case cp.OK:
		fmt.Fprintf(w, "checkpoints: %d of %d verified\n", cp.Verified, cp.Checkpoints)
	default:
		t := newTable(w, "CHECKPOINT", "RECORD", "KEY", "PROBLEM")
		for _, p := range cp.Problems {
			t.row(p.File, i64(p.Record), p.Key, p.Problem)
		}
		_ = t.flush()
	}
}

func newAuditCheckpointCmd() *cobra.Command {
	var o opFlags
	var keyFile, dir string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "checkpoint --key-file F --out DIR",
		Short: "Sign the audit's current head into a checkpoint file",
		Long: `Sign the audit's current head with Ed25519 into a new file in DIR
(audit-checkpoint-<record>-<time>.json: the ledger's last record and its
hash, and the ledger records since the previous checkpoint in DIR, with
their digests). Every audit entry written so far is first recorded in the
ledger, once the transactions that were running have ended (--wait bounds
that), and the records since the previous checkpoint are checked: what
no longer verifies is listed, the checkpoint written all the same (the
ledger is what it is), and the command exits 1.

The key file holds an Ed25519 private key, PEM PKCS #8, as
"openssl genpkey -algorithm ed25519 -out F" writes it; it must be readable
by its owner only (chmod 600). Give "openssl pkey -in F -pubout" to
drainer audit verify --checkpoints DIR --public-key. Run it from cron or a
sidecar, and copy DIR where the database's writers cannot.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keyFile == "" || dir == "" {
				return usagef("checkpoint needs --key-file F and --out DIR")
			}
			key, err := ops.LoadSigningKey(keyFile)
			if err != nil {
				return usagef("--key-file: %v", err)
			}
			if err := ops.CheckpointDir(dir); err != nil {
				return usagef("--out: %v", err)
			}
			c, done, err := o.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			r, err := c.Checkpoint(cmd.Context(), ops.CheckpointOptions{Dir: dir, Key: key, Wait: wait})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if o.json() {
				if err := writeJSON(w, r); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(w, "checkpoint: ledger record %d (%s) signed into %s, with %d record(s)\n", r.Record, r.Hash, r.Path, r.Records)
				for _, p := range r.Problems {
					fmt.Fprintf(w, "problem: %s\n", p)
				}
			}
			if len(r.Problems) > 0 {
				return fmt.Errorf("audit checkpoint: signed, but what it covers does not verify: %d problem(s) (listed above; see drainer audit verify)", len(r.Problems))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&keyFile, "key-file", "", "the Ed25519 private key (PEM PKCS #8, mode 600) to sign with")
	cmd.Flags().StringVar(&dir, "out", "", "the directory to write the checkpoint file into")
	cmd.Flags().DurationVar(&wait, "wait", time.Minute, "how long to wait for transactions that were running when it began")
	addOpFlags(cmd, &o)
	return cmd
}
