package riverjob

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
	"github.com/drainer-io/drainer/tooling/dbtest"
)

// TestConformance runs the shared adapter suite against River on a real
// database. Faults are produced by Postgres itself, from a trigger on
// river_job: SQLSTATE 40001 (transient), 23514 (terminal), or a wait on an
// advisory lock that the upstream's own connection holds (hang).
func TestConformance(t *testing.T) {
	dbtest.ServerURL(t, "postgres") // the shared server starts before the suite's leak checks
	dispatchtest.Run(t, func(t *testing.T) (dispatch.Adapter, dispatchtest.Upstream, string) {
		e := newEnv(t, testSchema)
		up := newFaultUpstream(t, e)
		return e.adapter(t, nil), up, e.secret
	})
}

// hangLock is the advisory lock a hung insert waits for (7283 in faultSQL).
const hangLock = 7283

// faultSQL installs the fault trigger. fault_plan holds the fault and how
// many inserts it hits; the sequence counts inserts since the plan was set
// and, unlike a table, keeps counting when the raised error rolls the
// inserting transaction back.
const faultSQL = `
CREATE TABLE public.fault_plan (code text NOT NULL, n bigint NOT NULL);
INSERT INTO public.fault_plan VALUES ('', 0);
CREATE SEQUENCE public.fault_calls;
CREATE FUNCTION public.inject_fault() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	p public.fault_plan;
BEGIN
	SELECT * INTO p FROM public.fault_plan;
	IF p.n > 0 THEN
		IF nextval('public.fault_calls') <= p.n THEN
			IF p.code = 'hang' THEN
				PERFORM pg_advisory_xact_lock(7283);
			ELSE
				RAISE EXCEPTION 'injected fault' USING ERRCODE = p.code;
			END IF;
		END IF;
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER inject_fault BEFORE INSERT ON ` + testSchema + `.river_job
	FOR EACH ROW EXECUTE FUNCTION public.inject_fault();
`

// faultUpstream is River's database seen as the provider: an effect is a
// job row.
type faultUpstream struct {
	t *testing.T
	e *env
	// locker holds hangLock while a hang fault is planned; closed at cleanup.
	locker *pgx.Conn
}

var _ dispatchtest.Upstream = (*faultUpstream)(nil)

func newFaultUpstream(t *testing.T, e *env) *faultUpstream {
	t.Helper()
	if _, err := e.admin.Exec(t.Context(), faultSQL); err != nil {
		t.Fatalf("install fault trigger: %v", err)
	}
	return &faultUpstream{t: t, e: e}
}

func (up *faultUpstream) Effects(t *testing.T, key string) int { return up.e.jobs(t, key) }

// Inject plans f for the next n inserts; it replaces a plan not yet used up.
func (up *faultUpstream) Inject(f dispatchtest.Fault, n int) bool {
	code := map[dispatchtest.Fault]string{
		dispatchtest.FaultTransient: "40001", // serialization_failure
		dispatchtest.FaultTerminal:  "23514", // check_violation
		dispatchtest.FaultHang:      "hang",
	}[f]
	if code == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if f == dispatchtest.FaultHang && up.locker == nil {
		conn, err := pgx.Connect(ctx, up.e.dsn)
		if err != nil {
			up.t.Fatal(err)
		}
		up.t.Cleanup(func() { conn.Close(context.Background()) }) // releases the lock
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", hangLock); err != nil {
			up.t.Fatal(err)
		}
		up.locker = conn
	}
	if _, err := up.e.admin.Exec(ctx, "SELECT setval('public.fault_calls', 1, false)"); err != nil {
		up.t.Fatal(err)
	}
	if _, err := up.e.admin.Exec(ctx, "UPDATE public.fault_plan SET code = $1, n = $2", code, n); err != nil {
		up.t.Fatal(err)
	}
	return true
}
