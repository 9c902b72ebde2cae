package producer

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/outbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// errRollback ends a fuzz transaction: every input starts from an empty outbox.
var errRollback = errors.New("roll back")

// contractProblems lists what docs/reference.md §1 (tuple) and Intent.Validate's
// documented payload rules refuse in in, by the name its error must carry.
func contractProblems(in Intent) []string {
	var names []string
	for _, f := range []struct {
		name, v  string
		required bool
	}{
		{"agent_run_id", in.AgentRunID, true}, {"step_id", in.StepID, true},
		{"tool_name", in.ToolName, true}, {"business_scope", in.BusinessScope, false},
	} {
		if (f.required && f.v == "") || !utf8.ValidString(f.v) || strings.IndexByte(f.v, 0) >= 0 || len(f.v) > idemkey.MaxFieldBytes {
			names = append(names, f.name)
		}
	}
	if len(in.Payload) == 0 || !json.Valid(in.Payload) || len(in.Payload) > 4*DefaultMaxPayloadBytes || !utf8.Valid(in.Payload) {
		names = append(names, "payload")
	} else if off, _ := outbox.JSONBRefused(in.Payload); off >= 0 {
		names = append(names, "payload") // \u0000 or a lone surrogate: jsonb refuses it
	}
	if in.ReadOnly {
		names = append(names, "read_only")
	}
	return names
}

// storable reports whether the database can receive s as text at all.
func storable(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// FuzzIntentValidate checks the producer's enqueue-side validation on
// arbitrary intents: Intent.Validate refuses exactly what docs/reference.md §1 and its
// payload rules refuse, naming each offending field; the SQL function
// drainer.enqueue agrees on the tuple (it refuses with 22023 exactly the
// tuples Go refuses); and an intent that Validate accepts is enqueued under
// the key Go computes, or refused by the database for its payload only (a
// data exception: jsonb's own rules, the size limit), never for its tuple.
// One database serves the whole fuzz process; every input's transaction is
// rolled back.
func FuzzIntentValidate(f *testing.F) {
	for _, seed := range []struct {
		run, step, tool, scope string
		payload                string
		readOnly               bool
	}{
		{"run-1", "charge", "charge_card", "invoice:42", `{"amount":500,"currency":"eur"}`, false},
		{"run-1", "charge", "charge_card", "", `{}`, false},
		{"run-1", "lookup", "get_customer", "", `{"id":"cus_1"}`, true},
		{"", "", "", "", ``, false},
		{"r\x00", "s", "t", "b\xff", `{`, false},
		{strings.Repeat("x", 1024), strings.Repeat("é", 513), "t", strings.Repeat("b", 1025), `[]`, false},
		{"r", "s", "t", "\u2028\"\\\n", `"a string"`, false},
		{"r", "s", "t", "", `{"nul":"\u0000"}`, false},
		{"r", "s", "t", "", `{"lone":"\ud800"}`, false},
		{"r", "s", "t", "", "{\"bad\":\"\xff\"}", false},
		{"r", "s", "t", "", `{"huge":1e999999}`, false},
		{"r", "s", "t", "", `  null  `, false},
		{"r", "s", "t", "", `{"a":1} x`, false},
	} {
		f.Add(seed.run, seed.step, seed.tool, seed.scope, []byte(seed.payload), seed.readOnly)
	}
	pool := newPool(f)
	ctx := context.Background()

	f.Fuzz(func(t *testing.T, run, step, tool, scope string, payload []byte, readOnly bool) {
		in := Intent{Tuple: idemkey.Tuple{AgentRunID: run, StepID: step, ToolName: tool, BusinessScope: scope},
			Payload: payload, ReadOnly: readOnly}
		err := in.Validate()
		problems := contractProblems(in)
		if (err == nil) != (len(problems) == 0) {
			t.Fatalf("Validate(tuple %q, payload %q, read_only %v) = %v; contract problems %v",
				[]string{run, step, tool, scope}, payload, readOnly, err, problems)
		}
		for _, name := range problems {
			if !strings.Contains(err.Error(), name) {
				t.Fatalf("Validate error %q does not name %s", err, name)
			}
		}

		// The SQL function agrees on the tuple.
		if !storable(run) || !storable(step) || !storable(tool) || !storable(scope) {
			return
		}
		tupleErr := in.Tuple.Validate()
		var key string
		var created bool
		sqlErr := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, "SELECT key, created FROM drainer.enqueue($1, $2, $3, $4, '{}'::jsonb)",
				run, step, tool, scope).Scan(&key, &created); err != nil {
				return err
			}
			return errRollback
		})
		switch {
		case tupleErr == nil && !errors.Is(sqlErr, errRollback):
			t.Fatalf("tuple %q accepted by Go, refused by drainer.enqueue: %v", []string{run, step, tool, scope}, sqlErr)
		case tupleErr == nil && (key != in.Tuple.Key() || !created):
			t.Fatalf("drainer.enqueue: key %s created %v; want Go's key %s, created", key, created, in.Tuple.Key())
		case tupleErr != nil && sqlCode(sqlErr) != "22023":
			t.Fatalf("tuple %q refused by Go (%v); drainer.enqueue answered %v, want SQLSTATE 22023", []string{run, step, tool, scope}, tupleErr, sqlErr)
		}
		if err != nil {
			return
		}

		// An intent Validate accepts is enqueued, or refused for its payload only.
		enqErr := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			if key, created, err = EnqueueTx(ctx, tx, in); err != nil {
				return err
			}
			return errRollback
		})
		if errors.Is(enqErr, errRollback) {
			if key != in.Tuple.Key() || !created {
				t.Fatalf("EnqueueTx: key %s created %v; want %s, created", key, created, in.Tuple.Key())
			}
			return
		}
		if code := sqlCode(enqErr); code == "22023" || (!strings.HasPrefix(code, "22") && code != "54000") {
			t.Fatalf("valid intent (payload %q) refused with SQLSTATE %q: %v; only the payload's data may be refused", payload, code, enqErr)
		}
	})
}

// sqlCode returns the SQLSTATE of err, or "" when it is not a server error.
func sqlCode(err error) string {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pgErr.Code
	}
	return ""
}
