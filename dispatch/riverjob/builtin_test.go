package riverjob_test

import (
	"context"
	"testing"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/builtin"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
	"github.com/drainer-io/drainer/dispatch/riverjob"
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
