package riverjob

import (
	"context"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/drainer-io/drainer/tooling/dbtest"
)

// testSchema is where the tests migrate River, to prove Config.Schema works.
const testSchema = "river"

// dsnSecret is the password put in the adapter's DSN (the test server trusts
// local connections, so it is never checked); it must never show in an error.
const dsnSecret = "pg-s3cr3t-5a0c"

// env is a fresh database with River migrated into a schema.
type env struct {
	dsn    string // with a password: secret
	secret string
	admin  *pgxpool.Pool
}

// newEnv creates a database, migrates River into schema (public when ""),
// and opens an admin pool; all are released when t ends.
func newEnv(t testing.TB, schema string) *env {
	t.Helper()
	dbURL := dbtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	if schema != "" {
		if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
			t.Fatal(err)
		}
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(admin), &rivermigrate.Config{Schema: schema, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatalf("migrate River: %v", err)
	}
	dsn, secret := withPassword(t, dbURL)
	return &env{dsn: dsn, secret: secret, admin: admin}
}

// withPassword returns dbURL with dsnSecret as its password, unless it has
// one already (an external test server), and the password.
func withPassword(t testing.TB, dbURL string) (dsn, password string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if pw, set := u.User.Password(); set {
		return dbURL, pw
	}
	u.User = url.UserPassword(u.User.Username(), dsnSecret)
	return u.String(), dsnSecret
}

// adapter builds an adapter on the env's database with River in testSchema,
// closed when t ends; edit may change the config first.
func (e *env) adapter(t testing.TB, edit func(*Config)) *Adapter {
	t.Helper()
	cfg := Config{DSN: e.dsn, Schema: testSchema, Timeout: 10 * time.Second}
	if edit != nil {
		edit(&cfg)
	}
	a, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// jobs returns the number of jobs holding key.
func (e *env) jobs(t testing.TB, key string) int {
	t.Helper()
	var n int
	err := e.admin.QueryRow(context.Background(),
		"SELECT count(*) FROM "+testSchema+".river_job WHERE args->>'key' = $1", key).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
