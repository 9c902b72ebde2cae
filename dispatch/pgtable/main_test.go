package pgtable

import (
	"testing"

	"github.com/drainer-io/drainer/tooling/dbtest"
)

// TestMain shares one PostgreSQL server between the package's tests and
// fails the package if a goroutine (an unclosed pool) is left behind.
func TestMain(m *testing.M) {
	dbtest.Main(m)
}
