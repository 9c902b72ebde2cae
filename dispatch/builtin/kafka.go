package builtin

import (
	"context"
	"errors"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/kafka"
)

// buildKafka builds a kafka adapter and asks the brokers for their metadata
// once. Brokers that cannot be reached yet do not fail the build: the
// adapter keeps trying in the background while its rows wait (no attempt
// consumed) and the other adapters drain. A refusal (SASL, TLS) does.
func buildKafka(ctx context.Context, name string, a *config.Adapter, timeout time.Duration, opts Options) (dispatch.Adapter, error) {
	c := kafka.Config{
		Brokers:  a.Brokers,
		Topic:    a.Topic,
		Timeout:  timeout,
		ClientID: "drainer/" + name,
		Logger:   opts.Logger,
	}
	if t := a.TLS; t != nil {
		c.TLS = &kafka.TLS{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName}
	}
	if s := a.SASL; s != nil {
		c.SASL = &kafka.SASL{Mechanism: s.Mechanism, Username: s.Username, Password: s.Password.Reveal()}
	}
	ad, err := kafka.New(c)
	if err != nil {
		return nil, err
	}
	err = ad.Probe(ctx)
	if errors.Is(err, dispatch.ErrUnavailable) {
		if opts.Logger != nil {
			opts.Logger.Warn("kafka: no broker reachable at startup; the other adapters drain, this one connects in the background", "err", err)
		}
		ad.StartInBackground(opts.Logger)
		return ad, nil
	}
	if err != nil {
		_ = ad.Close(context.Background())
		return nil, err
	}
	return ad, nil
}
