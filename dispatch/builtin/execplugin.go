package builtin

import (
	"cmp"
	"context"
	"errors"
	"log/slog"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/execplugin"
)

// buildPlugin builds a "plugin" adapter: it starts the configured executable
// (checksum verified first when sha256 is set) and checks that it speaks
// drainer's plugin protocol. The plugin's output is logged to opts.Logger
// with the adapter's name.
//
// When the config leaves key_ttl unset and the plugin reports none, the
// adapter is returned without its KeyTTL method, so that Build falls back to
// DefaultKeyTTL for the type instead of failing on
// execplugin.ErrKeyTTLNotReported.
func buildPlugin(ctx context.Context, name string, a *config.Adapter, opts Options) (dispatch.Adapter, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ad, err := execplugin.New(ctx, execplugin.Config{
		Command: a.Command,
		Args:    a.Args,
		SHA256:  a.SHA256,
		Timeout: cmp.Or(a.Timeout, config.DefaultAdapterTimeout),
		Logger:  log.With("adapter", name, "type", config.TypePlugin),
	})
	if err != nil {
		return nil, err
	}
	if a.KeyTTL == 0 {
		if _, err := ad.KeyTTL(ctx); errors.Is(err, execplugin.ErrKeyTTLNotReported) {
			return pluginWithoutKeyTTL{ad}, nil
		}
	}
	return ad, nil
}

// pluginWithoutKeyTTL hides the KeyTTL method of a plugin that reports none.
type pluginWithoutKeyTTL struct{ a *execplugin.Adapter }

func (p pluginWithoutKeyTTL) Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result {
	return p.a.Dispatch(ctx, m)
}

func (p pluginWithoutKeyTTL) Close() error { return p.a.Close() }
