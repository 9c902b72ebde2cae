package builtin

import (
	"context"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/natsjs"
)

// buildNATS builds a "nats" adapter: it connects, and checks the expected
// stream when the config names one. The connection is named
// "drainer/<adapter>" in the server's monitoring; opts.Logger, already
// scoped to the adapter by build, gets connection events.
func buildNATS(ctx context.Context, name string, a *config.Adapter, opts Options) (dispatch.Adapter, error) {
	return natsjs.New(ctx, natsjs.Config{
		Servers: a.Servers,
		Subject: a.Subject,
		Stream:  a.Stream,
		Timeout: a.Timeout,
		Name:    "drainer/" + name,
		Logger:  opts.Logger,
	})
}
