package builtin

import (
	"cmp"
	"context"
	"math"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/pgtable"
)

// buildPostgres builds a "postgres" adapter: it connects to a.DSN (revealed
// here, at the last step) and checks that a.Table can receive rows, so a
// missing table fails at startup, not at the first row. max_concurrency,
// when set, sizes the connection pool.
func buildPostgres(ctx context.Context, _ string, a *config.Adapter, _ Options) (dispatch.Adapter, error) {
	ad, err := pgtable.New(ctx, pgtable.Config{
		DSN:      a.DSN.Reveal(),
		Table:    a.Table,
		Timeout:  cmp.Or(a.Timeout, config.DefaultAdapterTimeout),
		MaxConns: int32(min(max(a.MaxConcurrency, 0), math.MaxInt32)),
	})
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return ad, nil
}
