package kafka

import (
	"testing"

	"github.com/drainer-io/drainer/tooling/dbtest"
)

// TestMain shares one PostgreSQL server between the package's engine tests
// and fails the package if a goroutine (a client, a broker, a pool) is left
// behind.
func TestMain(m *testing.M) {
	dbtest.Main(m)
}
