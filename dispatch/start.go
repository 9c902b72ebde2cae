package dispatch

import (
	"context"
	"errors"
	"log/slog"
)

// Prober is an adapter that contacts its provider when it starts (brokers,
// a server) and can be closed.
type Prober interface {
	Adapter
	Close(ctx context.Context) error
}

// StartProbed is the Start of an adapter that must reach its provider:
// newAdapter builds it, probe makes the first contact. A provider that
// cannot be reached yet (probe's error is ErrUnavailable) does not fail the
// start, so that it never holds the other adapters: unreachable is logged
// with the error, background keeps trying while the adapter's rows wait
// (no attempt consumed), and the adapter is returned. Any other error of
// probe (a refusal, a misconfigured route) closes the adapter and fails
// the start.
func StartProbed[A Prober](log *slog.Logger, unreachable string, newAdapter func() (A, error),
	probe func(context.Context, A) error, background func(A)) Start {
	return func(ctx context.Context) (Adapter, error) {
		ad, err := newAdapter()
		if err != nil {
			return nil, err
		}
		err = probe(ctx, ad)
		if errors.Is(err, ErrUnavailable) {
			if log != nil {
				log.Warn(unreachable, "err", err)
			}
			background(ad)
			return ad, nil
		}
		if err != nil {
			_ = ad.Close(context.Background())
			return nil, err
		}
		return ad, nil
	}
}
