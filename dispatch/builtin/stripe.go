package builtin

import (
	"cmp"
	"context"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/stripe"
)

// buildStripe builds a "stripe" adapter. The API key is revealed here, at
// the last step before the wire; a.BaseURL and a.StripeVersion may be empty
// (Stripe's API and the account's default version).
func buildStripe(_ context.Context, _ string, a *config.Adapter, opts Options) (dispatch.Adapter, error) {
	cfg := stripe.Config{
		APIKey:        a.APIKey.Reveal(),
		StripeVersion: a.StripeVersion,
		BaseURL:       a.BaseURL,
		Tools:         a.Tools,
		Timeout:       cmp.Or(a.Timeout, config.DefaultAdapterTimeout),
	}
	if opts.Version != "" {
		cfg.UserAgent = "drainer/" + opts.Version
	}
	ad, err := stripe.New(cfg)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return ad, nil
}
