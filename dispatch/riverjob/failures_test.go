package riverjob

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
)

// TestFaults checks each database failure's outcome, reason and redaction.
func TestFaults(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testSchema)
	up := newFaultUpstream(t, e)
	a := e.adapter(t, func(c *Config) { c.Timeout = 500 * time.Millisecond })
	// The fault used up, a dispatch succeeds: checked with the default
	// timeout, which a loaded machine's insert does not run out of.
	patient := e.adapter(t, nil)
	tests := []struct {
		fault   dispatchtest.Fault
		outcome dispatch.Outcome
		reason  string
		errHas  string
		refused bool // the server answered (the attempt counts); else NotSent
	}{
		{dispatchtest.FaultTransient, dispatch.Retry, ReasonDBTransient, "insert job: injected fault (SQLSTATE 40001)", true},
		{dispatchtest.FaultTerminal, dispatch.Terminal, ReasonDBRejected, "insert job: SQLSTATE 23514", true},
		{dispatchtest.FaultHang, dispatch.Retry, dispatch.ReasonTimeout, "insert job: no answer in time", false},
	}
	for _, tt := range tests {
		up.Inject(tt.fault, 1)
		m := testMessage()
		start := time.Now()
		r := a.Dispatch(t.Context(), m)
		assertRedacted(t, r, e.secret)
		if r.Outcome != tt.outcome || r.Reason != tt.reason || r.Refused != tt.refused || r.NotSent == tt.refused || r.Err == nil || !strings.Contains(r.Err.Error(), tt.errHas) {
			t.Errorf("%s: %s NotSent=%v Refused=%v (reason %q, err %v), want %s Refused=%v (reason %q, err %q)",
				tt.fault, r.Outcome, r.NotSent, r.Refused, r.Reason, r.Err, tt.outcome, tt.refused, tt.reason, tt.errHas)
		}
		if elapsed := time.Since(start); elapsed > 30*time.Second {
			t.Errorf("%s: took %v with a 500ms timeout: the timeout was not honoured", tt.fault, elapsed)
		}
		if n := e.jobs(t, m.Key); n != 0 {
			t.Errorf("%s: %d jobs after a failed insert", tt.fault, n)
		}
		dispatchOK(t, patient, m, dispatch.Success) // the fault was used up
	}
}

// TestMissingTableWaits: River's table dropped after the start (which
// checked it) is the whole adapter's configuration, not the row's fault:
// every row would fail alike and abort its run. The row waits, no attempt
// consumed (not sent, not ready), until the table is back.
func TestMissingTableWaits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testSchema)
	a := e.adapter(t, nil)
	if _, err := e.admin.Exec(t.Context(), "DROP TABLE river.river_job CASCADE"); err != nil {
		t.Fatal(err)
	}
	r := a.Dispatch(t.Context(), testMessage())
	assertRedacted(t, r, e.secret)
	if r.Outcome != dispatch.Retry || !r.NotSent || r.Reason != dispatch.ReasonNotReady || !strings.Contains(r.Err.Error(), "SQLSTATE 42P01") {
		t.Errorf("missing river_job: %s (reason %q, not sent %v, err %v), want a retry, not sent, not ready, with SQLSTATE 42P01", r.Outcome, r.Reason, r.NotSent, r.Err)
	}
}

func TestNewRequiresMigratedSchema(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testSchema)
	for _, schema := range []string{"", "elsewhere"} { // River lives in testSchema only
		_, err := New(t.Context(), Config{DSN: e.dsn, Schema: schema})
		if err == nil {
			t.Fatalf("New with schema %q succeeded", schema)
		}
		if msg := err.Error(); !strings.Contains(msg, "run rivermigrate") || !strings.Contains(msg, "Unapplied migrations") || strings.Contains(msg, e.secret) {
			t.Errorf("schema %q: %v", schema, err)
		}
	}
}

func TestSearchPathSchema(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "") // River in public
	a, err := New(t.Context(), Config{DSN: e.dsn})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	m := testMessage()
	dispatchOK(t, a, m, dispatch.Success)
	var n int
	if err := e.admin.QueryRow(t.Context(), "SELECT count(*) FROM public.river_job WHERE args->>'key' = $1", m.Key).Scan(&n); err != nil || n != 1 {
		t.Errorf("public.river_job holds %d jobs for the key (%v), want 1", n, err)
	}
}

func TestNewErrorsAreRedacted(t *testing.T) {
	t.Parallel()
	const secret = "n0t-in-errors"
	for _, dsn := range []string{
		"postgres://u:" + secret + "@127.0.0.1:1/db?connect_timeout=2",    // nothing listens on port 1
		"postgres://u:" + secret + "@127.0.0.1:notaport/db",               // unparsable
		"host=127.0.0.1 port=1 password=" + secret + " connect_timeout=2", // key=value form
		"host=127.0.0.1 password='" + secret,                              // unterminated quote
	} {
		_, err := New(t.Context(), Config{DSN: dsn, Timeout: 2 * time.Second})
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("New = %v; want an error without the password", err)
		}
	}
}

// TestConnectFailureIsNotSent dispatches through a pool whose server is
// gone: nothing can have been inserted.
func TestConnectFailureIsNotSent(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), "postgres://u:"+dsnSecret+"@127.0.0.1:1/db?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{DSN: "unused"}.WithDefaults()
	a := &Adapter{cfg: cfg, pool: pool, client: client, opts: &river.InsertOpts{Queue: cfg.Queue, UniqueOpts: uniqueOpts()}}
	r := a.Dispatch(t.Context(), testMessage())
	assertRedacted(t, r, dsnSecret)
	if r.Outcome != dispatch.Retry || !r.NotSent || r.Reason != dispatch.ReasonConnect {
		t.Errorf("unreachable database: %s NotSent=%v (reason %q, err %v), want retry NotSent connect", r.Outcome, r.NotSent, r.Reason, r.Err)
	}
}

func TestInvalidPayloadIsTerminal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testSchema)
	a := e.adapter(t, nil)
	m := testMessage()
	m.Payload = json.RawMessage(`{"note": "` + payloadSecret + `"`)
	r := a.Dispatch(t.Context(), m)
	assertRedacted(t, r, e.secret)
	if r.Outcome != dispatch.Terminal || !r.NotSent {
		t.Errorf("invalid JSON payload: %s (reason %q, err %v)", r.Outcome, r.Reason, r.Err)
	}
}
