// Package dbtest gives each test its own database on a real PostgreSQL
// server.
//
// Every test package that uses it needs a TestMain that hands control to
// [Main]:
//
//	func TestMain(m *testing.M) {
//		dbtest.Main(m)
//	}
//
// Tests then ask for a fresh, empty database and get its URL; the database
// is dropped when the test (or subtest) finishes:
//
//	func TestOutbox(t *testing.T) {
//		t.Parallel()
//		pool, err := pgxpool.New(t.Context(), dbtest.NewDatabase(t))
//		if err != nil {
//			t.Fatal(err)
//		}
//		t.Cleanup(pool.Close) // runs before the database is dropped
//		...
//	}
//
// # Which server
//
// The first call to [NewDatabase] or [ServerURL] in a test binary picks the
// server that all tests of the binary share:
//
//  1. the server at DRAINER_TEST_DATABASE_URL, if that is set (a
//     postgres:// URL of a role allowed to create databases; tests create
//     and drop their own databases there and never touch the one named in
//     the URL);
//  2. else a throwaway cluster started from the local PostgreSQL binaries
//     with package pgtemp (about a second, no Docker needed);
//  3. else a postgres:15-alpine container started with testcontainers-go.
//
// If none works the test fails, naming all three options and why each
// failed. dbtest never skips: a test that needs a database and gets none is
// a failure, not a pass.
//
// [Main] stops the server it started (the external one is left alone) once
// all tests have run, then fails the binary if goroutines leaked, as
// goleak.VerifyTestMain does. Close every pool and connection a test opens.
package dbtest
