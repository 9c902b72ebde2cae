package drainer

import (
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
)

// TestToolMapsAreBounded: the maps an engine keeps per tool_name of the
// rows it claims stay bounded however many tool names producers invent:
// the unrouted-tool log's and the deferrer's. Before, each kept one entry
// per name ever seen.
func TestToolMapsAreBounded(t *testing.T) {
	t.Parallel()
	var u unroutedLog
	log := slog.New(slog.DiscardHandler)
	d := newDeferrer(&Engine{})
	for i := range 5 * maxToolsRemembered {
		tool := "invented-" + strconv.Itoa(i)
		u.note(log, tool, nil)
		d.refuse(tool, outbox.RefusedUnrouted, time.Minute)
	}
	if len(u.seen) > maxToolsRemembered || len(d.last) > maxToolsRemembered {
		t.Fatalf("after %d tool names: the unrouted log remembers %d, the deferrer %d (bound %d)",
			5*maxToolsRemembered, len(u.seen), len(d.last), maxToolsRemembered)
	}
}
