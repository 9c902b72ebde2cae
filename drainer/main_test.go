package drainer

import (
	"github.com/drainer-io/drainer/outbox"
	"strconv"
	"testing"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// testStore is the store of the schema storetest migrates.
var testStore = store.MustNew(storetest.Schema)

func newPool(t testing.TB) *pgxpool.Pool { return storetest.NewPool(t) }

func enqueueN(t testing.TB, pool *pgxpool.Pool, run, tool string, n int) []string {
	t.Helper()
	return storetest.Enqueue(t, pool, run, tool, n)
}

func getRow(t testing.TB, pool *pgxpool.Pool, key string) storetest.State {
	t.Helper()
	return storetest.Get(t, pool, key)
}

func countByStatus(t testing.TB, pool *pgxpool.Pool) map[outbox.Status]int {
	t.Helper()
	return storetest.CountByStatus(t, pool)
}

func itoa(i int) string { return strconv.Itoa(i) }
