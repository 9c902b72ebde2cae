package riverjob_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/builtin"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
	"github.com/drainer-io/drainer/dispatch/riverjob"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// TestBuiltin builds a river adapter from a config file the way `drainer
// run` does: the DSN comes from the environment, and key_ttl, left unset,
// becomes River's retention.
func TestBuiltin(t *testing.T) {
	t.Parallel()
	dsn := riverjob.NewTestDSN(t)
	const file = `
adapters:
  jobs:
    type: river
    dsn: ${env:JOBS_DSN}
    job_kind: drainer_intent
    queue: intents
    schema: river
routes:
  charge_card: {adapter: jobs}
`
	cfg, err := config.Parse("drainer.yaml", []byte(file), config.LoadOptions{
		LookupEnv: func(name string) (string, bool) { return dsn, name == "JOBS_DSN" },
	})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := builtin.Build(t.Context(), cfg, builtin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(context.Background())
	e, ok := reg.Get("jobs")
	if !ok || e.KeyTTL != 24*time.Hour || e.Timeout != config.DefaultAdapterTimeout {
		t.Fatalf("entry %+v", e)
	}
	if r := e.Adapter.Dispatch(t.Context(), dispatchtest.NewMessage("charge_card", `{"x":1}`)); r.Outcome != dispatch.Success {
		t.Errorf("dispatch: %s (reason %q, err %v)", r.Outcome, r.Reason, r.Err)
	}
}

// buildJobs builds, the way `drainer run` does, a river adapter "jobs" on
// dsn with River in schema; the log lines go to logs.
func buildJobs(t *testing.T, dsn, schema string, logs *testkit.Buffer) (*dispatch.Registry, error) {
	t.Helper()
	file := `
adapters:
  jobs:
    type: river
    dsn: ${env:JOBS_DSN}
    schema: ` + schema + `
    timeout: 5s
routes:
  charge_card: {adapter: jobs}
`
	cfg, err := config.Parse("drainer.yaml", []byte(file), config.LoadOptions{
		LookupEnv: func(name string) (string, bool) { return dsn, name == "JOBS_DSN" },
	})
	if err != nil {
		t.Fatal(err)
	}
	return builtin.Build(t.Context(), cfg, builtin.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
}

// TestBuiltinDatabaseLater builds a river adapter while nothing listens at
// its DSN's address: the build succeeds with a log line naming the
// adapter, the adapter is not ready and holds its rows back without an
// attempt; once the database answers it becomes ready and inserts.
func TestBuiltinDatabaseLater(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(riverjob.NewTestDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	db := testkit.NewLater(t, u.Host)
	u.Host = db.Addr

	var logs testkit.Buffer
	reg, err := buildJobs(t, u.String(), "river", &logs)
	if err != nil {
		t.Fatalf("build with the database down: %v", err)
	}
	defer reg.Close(context.Background())
	if !strings.Contains(logs.String(), "river: database unreachable at startup") || !strings.Contains(logs.String(), "adapter=jobs") {
		t.Errorf("no log line naming the adapter:\n%s", logs.String())
	}
	e, _ := reg.Get("jobs")
	a := e.Adapter.(*riverjob.Adapter)
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

// TestBuiltinRefusedIsAnError: a database that answers and refuses (River
// not migrated in the schema, a role that does not exist) fails the build
// at once: it is a configuration problem, not one to wait out.
func TestBuiltinRefusedIsAnError(t *testing.T) {
	t.Parallel()
	dsn := riverjob.NewTestDSN(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User("no_such_role_for_drainer")
	for _, tt := range []struct{ name, dsn, schema, want string }{
		{"not migrated", dsn, "elsewhere", "River's tables are missing or out of date"},
		{"unknown role", u.String(), "river", "no_such_role_for_drainer"},
	} {
		var logs testkit.Buffer
		reg, err := buildJobs(t, tt.dsn, tt.schema, &logs)
		if err == nil {
			reg.Close(context.Background())
			t.Fatalf("%s: build succeeded", tt.name)
		}
		if dispatch.Unavailable(err) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "adapters.jobs") {
			t.Errorf("%s: build: %v; want a configuration error naming the adapter and %q", tt.name, err, tt.want)
		}
	}
}

// TestJobKindOptional: job_kind may be left out, in `drainer check` and
// `drainer run` alike, and the jobs then have kind DefaultJobKind; written
// empty, it is an error.
func TestJobKindOptional(t *testing.T) {
	t.Parallel()
	const file = `
adapters:
  jobs: {type: river, dsn: "${env:JOBS_DSN}", schema: river%s}
routes:
  charge_card: {adapter: jobs}
`
	dsn := riverjob.NewTestDSN(t)
	env := func(name string) (string, bool) { return dsn, name == "JOBS_DSN" }
	for _, check := range []bool{true, false} {
		if _, err := config.Parse("c.yaml", []byte(fmt.Sprintf(file, "")), config.LoadOptions{Check: check, LookupEnv: env}); err != nil {
			t.Errorf("without job_kind (check mode %v): %v", check, err)
		}
		_, err := config.Parse("c.yaml", []byte(fmt.Sprintf(file, `, job_kind: ""`)), config.LoadOptions{Check: check, LookupEnv: env})
		if err == nil || !strings.Contains(err.Error(), "adapters.jobs.job_kind: must not be empty") {
			t.Errorf("job_kind written empty (check mode %v): %v, want an error", check, err)
		}
	}
	cfg, err := config.Parse("c.yaml", []byte(fmt.Sprintf(file, "")), config.LoadOptions{LookupEnv: env})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := builtin.Build(t.Context(), cfg, builtin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(context.Background())
	e, _ := reg.Get("jobs")
	r := e.Adapter.Dispatch(t.Context(), dispatchtest.NewMessage("charge_card", `{}`))
	if r.Outcome != dispatch.Success || !strings.Contains(string(r.Response), `"kind":"`+riverjob.DefaultJobKind+`"`) {
		t.Errorf("dispatch: %s (%v), response %s; want a job of kind %s", r.Outcome, r.Err, r.Response, riverjob.DefaultJobKind)
	}
}
