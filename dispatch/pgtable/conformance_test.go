package pgtable

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
	"github.com/drainer-io/drainer/tooling/dbtest"
)

// faultsSQL installs, on table effects, a BEFORE INSERT trigger that fails
// the requests Inject designates. Requests are numbered by a sequence,
// which (unlike a counter in a table) survives the rollback of the failed
// statement.
const faultsSQL = `
CREATE SEQUENCE dispatchtest_requests;
CREATE TABLE dispatchtest_faults (fault text NOT NULL, first_request bigint NOT NULL, last_request bigint NOT NULL);
CREATE FUNCTION dispatchtest_fault() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  n bigint := nextval('dispatchtest_requests');
  f text;
BEGIN
  SELECT fault INTO f FROM dispatchtest_faults WHERE n BETWEEN first_request AND last_request LIMIT 1;
  CASE f
    WHEN 'transient' THEN RAISE EXCEPTION 'injected serialization failure' USING ERRCODE = 'serialization_failure';
    WHEN 'terminal' THEN RAISE EXCEPTION 'injected check violation' USING ERRCODE = 'check_violation';
    WHEN 'hang' THEN PERFORM pg_sleep(3600);
    ELSE NULL;
  END CASE;
  RETURN NEW;
END $$;
CREATE TRIGGER dispatchtest_fault BEFORE INSERT ON effects FOR EACH ROW EXECUTE FUNCTION dispatchtest_fault();`

// tableUpstream is a recipient database with the fault trigger.
type tableUpstream struct {
	pool  *pgxpool.Pool
	table string
}

func (u *tableUpstream) Effects(t *testing.T, key string) int {
	var n int
	if err := u.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+u.table+" WHERE key = $1", key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (u *tableUpstream) Inject(f dispatchtest.Fault, n int) bool {
	_, err := u.pool.Exec(context.Background(), `
WITH s AS (SELECT nextval('dispatchtest_requests') AS v)
INSERT INTO dispatchtest_faults SELECT $1, v + 1, v + $2 FROM s`, f.String(), n)
	return err == nil
}

// withPassword returns dsn with a password and that password: the URL's
// own, or a made-up one (the throwaway cluster trusts local connections and
// ignores it), so that the suite checks that it never leaks.
func withPassword(t *testing.T, dsn string) (string, string) {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := u.User.Password(); ok && p != "" {
		return dsn, p
	}
	const secret = "pg-s3cr3t-conformance"
	u.User = url.UserPassword(u.User.Username(), secret)
	return u.String(), secret
}

// TestConformance runs the shared adapter suite against a real database.
func TestConformance(t *testing.T) {
	dbtest.ServerURL(t, "postgres") // start the shared server before the suite's leak snapshots
	dispatchtest.Run(t, func(t *testing.T) (dispatch.Adapter, dispatchtest.Upstream, string) {
		db := newTestDB(t)
		table := db.createTable(t, "effects")
		db.exec(t, faultsSQL)
		dsn, secret := withPassword(t, db.url)
		a, err := New(t.Context(), Config{DSN: dsn, Table: "effects"})
		if err != nil {
			t.Fatal(err)
		}
		return a, &tableUpstream{pool: db.pool, table: table}, secret
	})
}
