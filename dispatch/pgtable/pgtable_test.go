package pgtable

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
)

const payloadSecret = "s3cr3t-payload-value"

func assertRedacted(t *testing.T, r dispatch.Result) {
	t.Helper()
	if r.Err != nil && strings.Contains(r.Err.Error(), payloadSecret) {
		t.Errorf("Result.Err reveals the payload: %v", r.Err)
	}
}

func TestDispatch(t *testing.T) {
	t.Parallel()
	db := newTestDB(t)
	table := db.createTable(t, "app", "effects")
	a := db.newTestAdapter(t, func(c *Config) { c.Table = "app.effects" })

	m := dispatchtest.NewMessage("charge_card", `{"amount": 500, "currency": "eur", "note": "`+payloadSecret+`"}`)
	m.Tuple.BusinessScope = ""
	m.Key = m.Tuple.Key()
	r := a.Dispatch(t.Context(), m)
	if r.Outcome != dispatch.Success || r.Reason != ReasonInserted || r.Err != nil {
		t.Fatalf("first: %+v", r)
	}
	if string(r.Response) != `{"inserted":true,"table":"app.effects"}` {
		t.Errorf("response %s", r.Response)
	}
	got, ok := db.row(t, table, m.Key)
	want := row{m.Tuple.AgentRunID, m.Tuple.StepID, "charge_card", "", `{"note": "` + payloadSecret + `", "amount": 500, "currency": "eur"}`}
	if !ok || got != want {
		t.Errorf("row %+v, want %+v", got, want)
	}

	// The same payload, re-encoded: still a replay (jsonb equality).
	again := *m
	again.Attempt = 2
	again.Payload = json.RawMessage(`{"currency":"eur","note":"` + payloadSecret + `","amount":500}`)
	r = a.Dispatch(t.Context(), &again)
	if r.Outcome != dispatch.Replay || r.Reason != dispatch.ReasonReplay || string(r.Response) != `{"inserted":true,"table":"app.effects"}` {
		t.Errorf("replay: %+v", r)
	}

	other := again
	other.Payload = json.RawMessage(`{"amount":900,"note":"` + payloadSecret + `"}`)
	r = a.Dispatch(t.Context(), &other)
	assertRedacted(t, r)
	if r.Outcome != dispatch.Terminal || r.Reason != dispatch.ReasonPayloadMismatch ||
		r.Err.Error() != "postgres: table app.effects already holds the key with another payload" {
		t.Errorf("mismatch: %+v", r)
	}
	if got, _ := db.row(t, table, m.Key); got != want {
		t.Errorf("row changed by the mismatch: %+v", got)
	}
}

// TestDispatchRefused: statements the server refuses are classified by
// SQLSTATE, marked NotSent (they rolled back) and quote no payload.
func TestDispatchRefused(t *testing.T) {
	t.Parallel()
	db := newTestDB(t)
	table := db.createTable(t, "effects")
	db.exec(t, "ALTER TABLE effects ADD CONSTRAINT amount_positive CHECK ((payload->>'amount')::int > 0)")
	db.exec(t, "CREATE UNIQUE INDEX effects_step ON effects (agent_run_id, step_id)")
	a := db.newTestAdapter(t, nil)

	dup := dispatchtest.NewMessage("charge_card", `{"amount":1}`)
	if r := a.Dispatch(t.Context(), dup); r.Outcome != dispatch.Success {
		t.Fatalf("setup: %+v", r)
	}
	sameStep := dispatchtest.NewMessage("charge_card", `{"amount":2}`)
	sameStep.Tuple.AgentRunID, sameStep.Tuple.StepID, sameStep.Tuple.BusinessScope = dup.Tuple.AgentRunID, dup.Tuple.StepID, "other"
	sameStep.Key = sameStep.Tuple.Key()

	tests := []struct {
		name    string
		m       *dispatch.Message
		reason  string
		errHas  string
		payload string
	}{
		{"invalid JSON", nil, ReasonData, "SQLSTATE 22P02: invalid input syntax for type json", `{"note":"` + payloadSecret + `"`},
		{"NUL escape", nil, ReasonData, "SQLSTATE 22P05", `{"note":"` + payloadSecret + `\u0000"}`},
		{"check constraint", nil, ReasonConstraint, `SQLSTATE 23514: new row for relation "effects" violates check constraint "amount_positive"`,
			`{"amount":-5,"note":"` + payloadSecret + `"}`},
		{"other unique index", sameStep, ReasonConstraint, `SQLSTATE 23505: duplicate key value violates unique constraint "effects_step"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tt.m
			if m == nil {
				m = dispatchtest.NewMessage("charge_card", tt.payload)
			}
			r := a.Dispatch(t.Context(), m)
			assertRedacted(t, r)
			if r.Outcome != dispatch.Terminal || r.NotSent || !r.Refused || r.Reason != tt.reason {
				t.Fatalf("got %s/%s NotSent=%v Refused=%v (%v), want terminal/%s, refused", r.Outcome, r.Reason, r.NotSent, r.Refused, r.Err, tt.reason)
			}
			var pgErr *Error
			if !errors.As(r.Err, &pgErr) || !strings.Contains(r.Err.Error(), tt.errHas) || !strings.HasPrefix(r.Err.Error(), "postgres insert: ") {
				t.Errorf("Err %q, want a *pgtable.Error containing %q", r.Err, tt.errHas)
			}
			if _, ok := db.row(t, table, m.Key); ok {
				t.Error("a refused row was inserted")
			}
		})
	}

	// A table dropped after New: the whole adapter's configuration, not
	// the row's fault; every row would fail alike (and abort its run): the
	// row waits, no attempt consumed, and the breaker does not count it.
	db.exec(t, "DROP TABLE effects")
	r := a.Dispatch(t.Context(), dispatchtest.NewMessage("charge_card", `{}`))
	if r.Outcome != dispatch.Retry || !r.NotSent || r.Reason != dispatch.ReasonNotReady || !strings.Contains(r.Err.Error(), "SQLSTATE 42P01") {
		t.Errorf("dropped table: %+v, want a retry, not sent, not ready, naming 42P01", r)
	}
}

// TestDispatchLockWait: an insert waiting on a lock past its deadline is
// cancelled on the server, so it is a plain retry and never lands later.
func TestDispatchLockWait(t *testing.T) {
	t.Parallel()
	db := newTestDB(t)
	table := db.createTable(t, "effects")
	a := db.newTestAdapter(t, nil)
	tx, err := db.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), "LOCK TABLE effects IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}

	m := dispatchtest.NewMessage("charge_card", `{"amount":1}`)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	r := a.Dispatch(ctx, m)
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Errorf("returned after %v", elapsed)
	}
	if r.Outcome != dispatch.Retry || !r.Refused || r.NotSent || r.Reason != dispatch.ReasonTimeout || !strings.Contains(r.Err.Error(), "SQLSTATE 57014") {
		t.Errorf("deadline: %+v, want retry/timeout, Refused, confirmed by 57014", r)
	}

	// The caller cancels (shutdown) while the insert waits.
	ctx, cancel = context.WithCancel(t.Context())
	time.AfterFunc(200*time.Millisecond, cancel)
	r = a.Dispatch(ctx, dispatchtest.NewMessage("charge_card", `{"amount":1}`))
	if r.Outcome != dispatch.Retry || !r.Refused || r.NotSent || r.Reason != dispatch.ReasonCancelled {
		t.Errorf("cancel: %+v, want retry/cancelled, Refused", r)
	}

	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, ok := db.row(t, table, m.Key); ok {
		t.Error("the cancelled insert landed after the lock was released")
	}
	// The pool's connections survived the cancels.
	if r := a.Dispatch(t.Context(), m); r.Outcome != dispatch.Success {
		t.Errorf("after the lock: %+v", r)
	}
}

func TestDispatchUnreachable(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), "postgres://drainer:pw-s3cr3t@127.0.0.1:1/none?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	a := newAdapter(pool, Config{Table: "effects", Timeout: 5 * time.Second})
	defer a.Close()
	r := a.Dispatch(t.Context(), dispatchtest.NewMessage("charge_card", `{"note":"`+payloadSecret+`"}`))
	assertRedacted(t, r)
	if r.Outcome != dispatch.Retry || !r.NotSent || r.Reason != dispatch.ReasonConnect || strings.Contains(r.Err.Error(), "pw-s3cr3t") {
		t.Errorf("got %+v, want retry/connect, NotSent, no password", r)
	}
}

func TestNewChecksTable(t *testing.T) {
	t.Parallel()
	db := newTestDB(t)
	db.exec(t, `CREATE SCHEMA app;
CREATE TABLE app.ok (key varchar(200) PRIMARY KEY, agent_run_id text, step_id text, tool_name text,
  business_scope text, payload jsonb, extra int, note text NOT NULL DEFAULT '');
CREATE TABLE wrong_types (key text PRIMARY KEY, agent_run_id text, step_id int, tool_name text, business_scope text, payload json);
CREATE TABLE missing (key text PRIMARY KEY, payload jsonb);
CREATE TABLE no_key (key text, agent_run_id text, step_id text, tool_name text, business_scope text, payload jsonb);
CREATE TABLE deferred (key text UNIQUE DEFERRABLE INITIALLY DEFERRED, agent_run_id text, step_id text, tool_name text, business_scope text, payload jsonb);
CREATE TABLE composite (key text, agent_run_id text, step_id text, tool_name text, business_scope text, payload jsonb, PRIMARY KEY (key, step_id));
CREATE TABLE required_extra (key text PRIMARY KEY, agent_run_id text, step_id text, tool_name text, business_scope text, payload jsonb, tenant int NOT NULL);
CREATE VIEW a_view AS SELECT * FROM app.ok;
CREATE TABLE "Mixed" (key text PRIMARY KEY, agent_run_id text, step_id text, tool_name text, business_scope text, payload jsonb);`)

	tests := []struct {
		table string
		want  []string // substrings; none means New succeeds
	}{
		{"app.ok", nil},
		{"Mixed", nil},
		{"absent", []string{`table "absent" does not exist; create it (pgtable.RecipientTableDDL)`, `CREATE TABLE "absent" (`}},
		{"app.absent", []string{`table "app"."absent" does not exist`}},
		{"mixed", []string{`table "mixed" does not exist`}},
		{"wrong_types", []string{"column step_id is integer, want text or character varying", "column payload is json, want jsonb"}},
		{"missing", []string{`table "missing" cannot receive rows: missing columns agent_run_id, step_id, tool_name, business_scope`}},
		{"no_key", []string{"column key must be the primary key"}},
		{"deferred", []string{"column key must be the primary key"}},
		{"composite", []string{"column key must be the primary key"}},
		{"required_extra", []string{"column tenant is NOT NULL without a default, and the adapter does not fill it"}},
		{"a_view", []string{`"a_view" is not a table`}},
	}
	for _, tt := range tests {
		t.Run(tt.table, func(t *testing.T) {
			a, err := New(t.Context(), Config{DSN: db.url, Table: tt.table})
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				a.Close()
				return
			}
			if err == nil {
				a.Close()
				t.Fatalf("New succeeded, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New: %v\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

func TestNewConnectionErrors(t *testing.T) {
	t.Parallel()
	const password = "pw-s3cr3t"
	tests := []struct{ dsn, want string }{
		{"postgres://u:" + password + "@host:bad/db", "dsn: cannot parse the connection string: invalid port"},
		{"host=x password=" + password + " port=abc", "dsn: cannot parse the connection string: invalid port"},
		{"postgres://u:" + password + "@127.0.0.1:1/db?connect_timeout=2", "look up table"},
	}
	for _, tt := range tests {
		a, err := New(t.Context(), Config{DSN: tt.dsn, Table: "effects"})
		if err == nil {
			a.Close()
			t.Fatalf("New(%s) succeeded", tt.want)
		}
		if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), password) {
			t.Errorf("New: %v, want %q without the password", err, tt.want)
		}
	}
}

func TestNewPoolSize(t *testing.T) {
	t.Parallel()
	db := newTestDB(t)
	db.createTable(t, "effects")
	for _, tt := range []struct {
		dsnParam string
		maxConns int32
		want     int32
	}{
		{"", 0, DefaultMaxConns},
		{"", 7, 7},
		{"pool_max_conns=3", 0, 3},
		{"pool_max_conns=3", 9, 9},
	} {
		a := db.newTestAdapter(t, func(c *Config) {
			if tt.dsnParam != "" {
				sep := "?"
				if strings.Contains(c.DSN, "?") {
					sep = "&"
				}
				c.DSN += sep + tt.dsnParam
			}
			c.MaxConns = tt.maxConns
		})
		if got := a.pool.Config().MaxConns; got != tt.want {
			t.Errorf("dsn%s, MaxConns %d: pool of %d, want %d", tt.dsnParam, tt.maxConns, got, tt.want)
		}
		if got := a.pool.Config().ConnConfig.RuntimeParams["application_name"]; got != "drainer" {
			t.Errorf("application_name %q", got)
		}
	}
}
