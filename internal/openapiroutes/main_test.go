package openapiroutes

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: a server,
// a handler or a pooled connection that was not closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
