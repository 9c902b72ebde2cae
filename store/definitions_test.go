package store_test

import (
	"testing"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// TestAlertToolAgrees: the alert tool the schema knows (alert rows never
// abort a run) is the one the daemon routes.
func TestAlertToolAgrees(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	var tool string
	if err := pool.QueryRow(t.Context(), "SELECT drainer.alert_tool()").Scan(&tool); err != nil {
		t.Fatal(err)
	}
	if tool != outbox.AlertTool {
		t.Fatalf("drainer.alert_tool() = %q, outbox.AlertTool = %q", tool, outbox.AlertTool)
	}
}
