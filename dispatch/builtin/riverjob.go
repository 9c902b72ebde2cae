package builtin

import (
	"context"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/riverjob"
)

// buildRiver builds a "river" adapter: it connects to the target database
// and checks River's migrations there, so a missing schema fails startup.
// opts.Logger, already scoped to the adapter by build, gets River's own log
// lines.
func buildRiver(ctx context.Context, _ string, a *config.Adapter, opts Options) (dispatch.Adapter, error) {
	return riverjob.New(ctx, riverjob.Config{
		DSN:     a.DSN.Reveal(),
		Queue:   a.Queue,
		JobKind: a.JobKind,
		Schema:  a.Schema,
		Timeout: a.Timeout,
		Logger:  opts.Logger,
	})
}
