package builtin

import (
	"context"
	"log/slog"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/riverjob"
)

// buildRiver builds a "river" adapter: it connects to the target database
// and checks River's migrations there, so a missing schema fails startup.
func buildRiver(ctx context.Context, name string, a *config.Adapter, opts Options) (dispatch.Adapter, error) {
	return riverjob.New(ctx, riverjob.Config{
		DSN:     a.DSN.Reveal(),
		Queue:   a.Queue,
		JobKind: a.JobKind,
		Schema:  a.Schema,
		Timeout: a.Timeout,
		Logger:  adapterClientLogger(opts, name),
	})
}

// adapterClientLogger returns the logger handed to an adapter's client library.
func adapterClientLogger(opts Options, name string) *slog.Logger {
	if opts.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return opts.Logger.With("adapter", name)
}
