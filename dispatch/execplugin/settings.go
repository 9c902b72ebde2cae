package execplugin

import (
	"context"
	"errors"
	"path/filepath"
	"regexp"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
)

// The plugin adapter's config keys and their rules (docs/reference.md §4),
// and its registration as adapter type plugin.

// Settings are the keys of a plugin adapter in the config file.
type Settings struct {
	// Command is the executable, an absolute path.
	Command string   `yaml:"command"`
	Args    []string `yaml:"args"`
	// SHA256 is the lower-case hex SHA-256 the executable must have.
	SHA256 string `yaml:"sha256"`
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Check reports every problem of the settings; args are never quoted. In
// check mode it also looks at the executable on this machine: one that
// `drainer run` would refuse to start here (missing, not executable,
// another sha256) is a warning, since check may run elsewhere than the
// daemon; the daemon refuses it when it starts the adapter.
func (s *Settings) Check(c *wire.Checker) {
	command := c.Require("command", s.Command == "")
	if command && !filepath.IsAbs(s.Command) {
		c.Errorf("command", "must be an absolute path, got %s", c.Quote("command", s.Command))
		command = false
	}
	pinned := c.Set("sha256", s.SHA256 == "") && c.Known("sha256")
	if pinned && !sha256Hex.MatchString(s.SHA256) {
		c.Errorf("sha256", "must be 64 lower-case hex digits (the output of sha256sum)")
		pinned = false
	}
	if c.CheckMode && command {
		checkExecutable(c, s.Command, pinned, s.SHA256)
	}
}

// checkExecutable warns when the executable at path (an absolute path),
// pinned to sum when pinned is set, cannot be run on this machine, naming
// it as written (a path from ${env:X} is not quoted).
func checkExecutable(c *wire.Checker, path string, pinned bool, sum string) {
	const f = "command"
	problem := commandProblem(path)
	if problem == "" && pinned {
		problem = checksumProblem(path, sum)
	}
	if problem != "" {
		c.Warnf(f, "on this machine, plugin executable %s %s: drainer run would refuse to start the adapter", c.Quote(f, path), problem)
	}
}

// configure turns a plugin adapter's settings into its runtime config; its
// Start starts the executable (checksum verified first when sha256 is set)
// and checks that it speaks drainer's plugin protocol. The plugin's output
// is logged to in.Logger with the adapter's name.
//
// When the config leaves key_ttl unset and the plugin reports none, the
// adapter is returned without its KeyTTL method, so that the build falls
// back to the type's default instead of failing on ErrKeyTTLNotReported.
func configure(in dispatch.BuildInput) (dispatch.Start, error) {
	s := in.Settings.(*Settings)
	c := Config{Command: s.Command, Args: s.Args, SHA256: s.SHA256, Timeout: in.Timeout, Logger: in.Logger}
	if c.Logger != nil {
		c.Logger = c.Logger.With("type", "plugin")
	}
	if err := c.WithDefaults().Validate(); err != nil {
		return nil, err
	}
	return func(ctx context.Context) (dispatch.Adapter, error) {
		a, err := New(ctx, c)
		if err != nil {
			return nil, err
		}
		if in.KeyTTL == 0 {
			if _, err := a.KeyTTL(ctx); errors.Is(err, ErrKeyTTLNotReported) {
				return withoutKeyTTL{a}, nil
			}
		}
		return a, nil
	}, nil
}

// withoutKeyTTL hides the KeyTTL method of a plugin that reports none.
type withoutKeyTTL struct{ a *Adapter }

func (p withoutKeyTTL) Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result {
	return p.a.Dispatch(ctx, m)
}

func (p withoutKeyTTL) Close() error { return p.a.Close() }

func init() {
	dispatch.RegisterKind(dispatch.Kind{
		Type:        "plugin",
		NewSettings: func() dispatch.Settings { return new(Settings) },
		Configure:   configure,
	})
}
