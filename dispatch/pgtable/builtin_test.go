package pgtable_test

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/builtin"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
	"github.com/drainer-io/drainer/dispatch/pgtable"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// buildLedger builds, the way `drainer run` does, a postgres adapter
// "ledger" on dsn and table; the log lines go to logs.
func buildLedger(t *testing.T, dsn, table string, logs *testkit.Buffer) (*dispatch.Registry, error) {
	t.Helper()
	file := `
adapters:
  ledger:
    type: postgres
    dsn: ${env:LEDGER_DSN}
    table: ` + table + `
    timeout: 5s
routes:
  charge_card: {adapter: ledger}
`
	cfg, err := config.Parse("drainer.yaml", []byte(file), config.LoadOptions{
		LookupEnv: func(name string) (string, bool) { return dsn, name == "LEDGER_DSN" },
	})
	if err != nil {
		t.Fatal(err)
	}
	return builtin.Build(t.Context(), cfg, builtin.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
}

// buildLedgerLater builds the adapter "ledger" (buildLedger) on table of
// a test database that nothing serves yet: the build is made while the
// database is unreachable, and db.Open brings it up. The registry is
// closed when t ends.
func buildLedgerLater(t *testing.T, table string, logs *testkit.Buffer) (*dispatch.Registry, *testkit.Later) {
	t.Helper()
	u, err := url.Parse(pgtable.NewTestTable(t, "effects"))
	if err != nil {
		t.Fatal(err)
	}
	db := testkit.NewLater(t, u.Host)
	u.Host = db.Addr
	reg, err := buildLedger(t, u.String(), table, logs)
	if err != nil {
		t.Fatalf("build with the database down: %v", err)
	}
	t.Cleanup(func() { reg.Close(context.Background()) })
	return reg, db
}

// TestBuiltinDatabaseLater builds a postgres adapter while nothing listens
// at its DSN's address: the build succeeds with a log line naming the
// adapter, the adapter is not ready and holds its rows back without an
// attempt; once the database answers it becomes ready and inserts.
func TestBuiltinDatabaseLater(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	reg, db := buildLedgerLater(t, "effects", &logs)
	if !strings.Contains(logs.String(), "postgres: database unreachable at startup") || !strings.Contains(logs.String(), "adapter=ledger") {
		t.Errorf("no log line naming the adapter:\n%s", logs.String())
	}
	e, _ := reg.Get("ledger")
	a := e.Adapter.(*pgtable.Adapter)
	if a.Ready() {
		t.Fatal("ready without a database")
	}
	r := a.Dispatch(t.Context(), dispatchtest.NewMessage("charge_card", `{}`))
	if r.Outcome != dispatch.Retry || !r.NotSent || r.Reason != dispatch.ReasonNotReady {
		t.Fatalf("dispatch before the database: %s (%s, NotSent %v, %v), want retry not_ready, not sent", r.Outcome, r.Reason, r.NotSent, r.Err)
	}

	db.Open(t)
	testkit.WaitFor(t, time.Minute, "the adapter to connect", func() (bool, string) { return a.Ready(), "" })
	if r := a.Dispatch(t.Context(), dispatchtest.NewMessage("charge_card", `{}`)); r.Outcome != dispatch.Success {
		t.Fatalf("dispatch once ready: %s (%s, %v)", r.Outcome, r.Reason, r.Err)
	}
}

// TestBuiltinRefusedIsAnError: a database that answers and refuses (a
// missing table, a role that does not exist) fails the build at once: it
// is a configuration problem, not one to wait out.
func TestBuiltinRefusedIsAnError(t *testing.T) {
	t.Parallel()
	dsn := pgtable.NewTestTable(t, "effects")
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User("no_such_role_for_drainer")
	for _, tt := range []struct{ name, dsn, table, want string }{
		{"missing table", dsn, "absent", `table "absent" does not exist`},
		{"unknown role", u.String(), "effects", "no_such_role_for_drainer"},
	} {
		var logs testkit.Buffer
		reg, err := buildLedger(t, tt.dsn, tt.table, &logs)
		if err == nil {
			reg.Close(context.Background())
			t.Fatalf("%s: build succeeded", tt.name)
		}
		if dispatch.Unavailable(err) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "adapters.ledger") {
			t.Errorf("%s: build: %v; want a configuration error naming the adapter and %q", tt.name, err, tt.want)
		}
	}
}

// TestBuiltinLaterRefusalSaysSo: a database unreachable at startup that,
// once it answers, refuses the start (the table does not exist) makes the
// adapter say so, in its rows' errors and its reason for not being ready,
// rather than that the database is unreachable; and the refusal repeated
// at each try is logged once, not every few seconds.
func TestBuiltinLaterRefusalSaysSo(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	reg, db := buildLedgerLater(t, "absent", &logs)
	e, _ := reg.Get("ledger")
	a := e.Adapter.(*pgtable.Adapter)
	db.Open(t)
	const refused = "refused the start"
	testkit.WaitFor(t, time.Minute, "the adapter to say the database refused", func() (bool, string) {
		return strings.Contains(a.NotReadyReason(), refused), a.NotReadyReason()
	})
	r := a.Dispatch(t.Context(), dispatchtest.NewMessage("charge_card", `{}`))
	if r.Reason != dispatch.ReasonNotReady || r.Err == nil || !strings.Contains(r.Err.Error(), refused) || !strings.Contains(r.Err.Error(), `"absent" does not exist`) {
		t.Fatalf("dispatch while refused: %s (%s, %v), want not_ready saying the start was refused and why", r.Outcome, r.Reason, r.Err)
	}
	// Tries go on every 5 s at most: in 12 s, two more at least.
	time.Sleep(12 * time.Second)
	if n := strings.Count(logs.String(), refused); n != 1 {
		t.Fatalf("the same refusal logged %d times, want once a minute:\n%s", n, logs.String())
	}
}
