//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5/pgconn"
	"pgregory.net/rapid"
)

// The model's tampering: what someone who can write the database does to
// the audit, among the daemons' work, the pruning and the rotations. Every
// tampering must still be reported by `drainer audit verify` at the end of
// this sequence and of every later one (tamper evidence survives pruning,
// rotation and truncation), and nothing else may be.

// Tamper kinds (storetest's tamperers).
const (
	tamperEdit   = "edit"   // an entry's content changed, its hash kept
	tamperDelete = "delete" // an entry removed from the middle of a chain
	tamperInsert = "insert" // a forged entry linked into a chain
	tamperStatus = "status" // a row's status changed with the audit trigger off
	tamperAnchor = "anchor" // a chain's anchor deleted
	tamperRow    = "row"    // a row deleted outside retention (no trigger records it)
)

// actTamper tampers with the audit of one settled row of the sequence.
// Status changes and row deletions are made on note rows only (no
// compensation, so no saga reads them); a status goes from succeeded to
// cancelled or from failed or cancelled to succeeded. The row's own
// invariants are then not checked (its status, or its absence, is the
// tamperer's), the audit's are.
func (m *seqModel) actTamper(rt *rapid.T) bool {
	e := m.e
	kind := rapid.SampledFrom([]string{tamperEdit, tamperDelete, tamperInsert, tamperStatus, tamperAnchor, tamperRow}).Draw(rt, "tamper")
	var keys []string
	for _, in := range m.intents {
		onRow := kind == tamperStatus || kind == tamperRow
		if _, done := e.tampered[in.key]; in.committed && !done && (!onRow || in.tool == toolNote) {
			keys = append(keys, in.key)
		}
	}
	if len(keys) == 0 {
		return false
	}
	st := m.statuses(keys)
	keys = slices.DeleteFunc(keys, func(k string) bool {
		s := st[k]
		return s != "succeeded" && s != "failed" && s != "cancelled" && s != "compensated"
	})
	if len(keys) == 0 {
		return false
	}
	key := rapid.SampledFrom(keys).Draw(rt, "tamper key")
	var entries, anchors, rows int
	if err := withRetry(func(ctx context.Context) error {
		return e.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM drainer.audit WHERE key = $1),
		        (SELECT count(*) FROM drainer.audit_anchors WHERE key = $1),
		        (SELECT count(*) FROM drainer.outbox WHERE key = $1)`, key).Scan(&entries, &anchors, &rows)
	}); err != nil {
		m.rt.Fatalf("tamper: read %s: %v", key, err)
	}
	switch kind {
	case tamperEdit, tamperInsert:
		if entries < 1 {
			return false
		}
	case tamperDelete:
		if entries < 2 {
			return false
		}
	case tamperAnchor:
		if anchors < 1 {
			return false
		}
	case tamperStatus, tamperRow:
		if rows < 1 {
			return false
		}
	}
	err := softly(e.t, func(t testing.TB) {
		switch kind {
		case tamperEdit:
			storetest.TamperEdit(t, e.pool, key)
		case tamperDelete:
			storetest.TamperDelete(t, e.pool, key)
		case tamperInsert:
			storetest.TamperInsert(t, e.pool, key)
		case tamperAnchor:
			storetest.TamperAnchor(t, e.pool, key)
		case tamperRow:
			storetest.TamperRow(t, e.pool, key)
		case tamperStatus:
			to := outbox.StatusSucceeded
			if st[key] == "succeeded" {
				to = outbox.StatusCancelled
			}
			storetest.TamperStatus(t, e.pool, key, to)
		}
	})
	if err != nil {
		if !transactionDied(err) {
			// A broken tampering: it would shrink what the model proves
			// without anyone noticing.
			m.rt.Fatalf("tamper: %s the audit of %s: %v", kind, key, err)
		}
		// A lock held by a transaction the model keeps open (past the
		// pool's lock_timeout), a deadlock, a restart of Postgres: a
		// failed step, as for any other writer. Each tamperer is one
		// transaction: nothing was changed.
		m.rt.Logf("tamper: %s the audit of %s failed, nothing tampered: %v", kind, key, err)
		return false
	}
	e.tampered[key] = kind
	m.rt.Logf("tamper: %s the audit of %s", kind, key)
	m.tally["tamper "+kind]++
	return true
}

// checkTampering runs `drainer audit verify`: with nothing tampered, it
// must pass; otherwise it must report every key tampered with in this run
// (this sequence's and every earlier one's) and no other.
func (m *seqModel) checkTampering(fail func(string, ...any)) {
	e := m.e
	res := e.cli("audit", "verify", "--output", "json", "--limit", "100000")
	if len(e.tampered) == 0 {
		if res.code != 0 {
			fail("drainer audit verify: %s", res)
		}
		return
	}
	if res.code != 1 {
		fail("drainer audit verify after %d tamperings exited %d, want 1: %s", len(e.tampered), res.code, res)
		return
	}
	var v struct {
		Broken []struct {
			Key     string `json:"key"`
			Problem string `json:"problem"`
		} `json:"broken"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &v); err != nil {
		fail("drainer audit verify --output json: %v in %q", err, res.stdout)
		return
	}
	reported := map[string][]string{}
	for _, b := range v.Broken {
		reported[b.Key] = append(reported[b.Key], b.Problem)
	}
	for key, kind := range e.tampered {
		if len(reported[key]) == 0 {
			fail("tampering (%s) of %s's audit is no longer reported by drainer audit verify", kind, key)
		}
	}
	for key, problems := range reported {
		// A ledger record covers many chains (its bucket's anchors, a range
		// of entries): what no longer matches it is reported under each
		// chain it covers, tampered or not. A chain's own problem names
		// only a chain that was tampered with.
		own := slices.DeleteFunc(slices.Clone(problems), func(p string) bool { return strings.HasPrefix(p, "ledger record ") })
		if _, ok := e.tampered[key]; !ok && key != "" && len(own) > 0 {
			fail("drainer audit verify reports %s, which nobody tampered with: %s", key, strings.Join(own, "; "))
		}
	}
	m.tally["tamperings still reported"] = len(e.tampered)
}

// transactionDied reports whether err (from softly) is a transaction the
// server ended, as any writer's may end among the model's actions: a
// lock_timeout, a deadlock, a serialization failure, a statement_timeout,
// a connection lost to a restart of Postgres (a wrapped error with no
// SQLSTATE). A helper's own failure wraps no error, and any other SQLSTATE
// is a broken statement.
func transactionDied(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return errors.Unwrap(err) != nil
	}
	switch c := pgErr.Code; c {
	case "40001", "40P01", "55P03", "57014", "25P02":
		return true
	default:
		return strings.HasPrefix(c, "57P") // admin shutdown, crash shutdown, cannot connect now
	}
}

// softly runs do, whose helpers fail their test with Fatal, and returns
// the failure instead: do runs on a goroutine of its own with a test whose
// Fatal records the message and ends that goroutine alone. The returned
// error wraps the first error among Fatal's arguments, so the caller can
// tell a lock timeout from a broken statement.
func softly(t testing.TB, do func(testing.TB)) error {
	s := &softTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		do(s)
	}()
	<-done
	return s.err
}

// softTB is a test whose Fatal and Fatalf end the calling goroutine and
// keep the message (softly).
type softTB struct {
	testing.TB
	err error
}

func (s *softTB) Fatal(args ...any) {
	s.fail(fmt.Sprint(args...), args)
}

func (s *softTB) Fatalf(format string, args ...any) {
	s.fail(fmt.Sprintf(format, args...), args)
}

func (s *softTB) fail(msg string, args []any) {
	s.err = errors.New(msg)
	for _, a := range args {
		if cause, ok := a.(error); ok {
			s.err = fmt.Errorf("%s: %w", msg, cause)
			break
		}
	}
	runtime.Goexit()
}

// TestTransactionDied: what the model's tampering lets pass as a failed
// step, and what fails the test.
func TestTransactionDied(t *testing.T) {
	t.Parallel()
	soft := func(args ...any) error {
		return softly(t, func(tb testing.TB) { tb.Fatal(args...) })
	}
	for _, c := range []struct {
		err  error
		died bool
	}{
		{soft(&pgconn.PgError{Code: "55P03"}), true},
		{soft(fmt.Errorf("update: %w", &pgconn.PgError{Code: "40P01"})), true},
		{soft(&pgconn.PgError{Code: "57P01"}), true},
		{soft(io.ErrUnexpectedEOF), true}, // the connection lost to a restart
		{soft(&pgconn.PgError{Code: "42703"}), false},
		{soft(&pgconn.PgError{Code: "23505"}), false},
		{soft("tamper status of k: <nil> (0 rows)"), false},
	} {
		if c.err == nil {
			t.Fatal("softly returned no error for a Fatal")
		}
		if got := transactionDied(c.err); got != c.died {
			t.Errorf("transactionDied(%v) = %v, want %v", c.err, got, c.died)
		}
	}
}
