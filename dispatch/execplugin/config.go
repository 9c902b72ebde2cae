package execplugin

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/drainer-io/drainer/dispatch/wire"
)

// Defaults for zero Config fields.
const (
	DefaultTimeout      = 10 * time.Second
	DefaultStartTimeout = 30 * time.Second
)

// Config configures one plugin adapter instance.
type Config struct {
	// Command is the plugin executable, an absolute path.
	Command string
	// Args are passed to the plugin (not including the command itself).
	Args []string
	// SHA256 is the lower-case hex SHA-256 the executable must have (the
	// output of sha256sum); empty means not checked. It is checked before
	// every start of the process.
	SHA256 string
	// Timeout bounds one attempt; the caller's context deadline applies too,
	// whichever comes first.
	Timeout time.Duration
	// StartTimeout bounds one start of the process, until the plugin has
	// completed the handshake and answered Info.
	StartTimeout time.Duration
	// Logger receives the adapter's logs and the plugin's output; nil
	// discards them.
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.StartTimeout = cmp.Or(c.StartTimeout, DefaultStartTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every problem of c at once, each naming its field: the
// rules of the config file's keys (Settings.Check) and of the runtime
// fields. Args are never quoted. That the executable exists is checked by
// New, before every start.
func (c Config) Validate() error {
	ch := wire.NewChecker(nil)
	(&Settings{Command: c.Command, Args: c.Args, SHA256: c.SHA256}).Check(ch)
	if c.Timeout < 0 {
		ch.Errorf("timeout", "must not be negative")
	}
	if c.StartTimeout < 0 {
		ch.Errorf("start timeout", "must not be negative")
	}
	return ch.Errs.Err()
}

// checkCommand checks that the executable exists and can be run.
func checkCommand(path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("plugin executable %s does not exist", path)
	case err != nil:
		if pe, ok := errors.AsType[*fs.PathError](err); ok {
			err = pe.Err // its text names the path again
		}
		return fmt.Errorf("plugin executable %s: %w", path, err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("plugin executable %s is not a regular file", path)
	case fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("plugin executable %s is not executable", path)
	}
	return nil
}
