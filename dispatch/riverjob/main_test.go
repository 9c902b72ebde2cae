package riverjob

import (
	"testing"

	"github.com/drainer-io/drainer/tooling/dbtest"
)

// TestMain stops the shared test server after the tests and fails the
// package if a goroutine (a pool, a River client) outlives them.
func TestMain(m *testing.M) {
	dbtest.Main(m)
}
