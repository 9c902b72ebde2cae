package execplugin

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
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
	if problem := commandProblem(path); problem != "" {
		return fmt.Errorf("plugin executable %s %s", path, problem)
	}
	return nil
}

// commandProblem says what keeps the executable at path from being run
// ("does not exist", "is not executable", …), without quoting the path; ""
// when nothing does.
func commandProblem(path string) string {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "does not exist"
	case err != nil:
		if pe, ok := errors.AsType[*fs.PathError](err); ok {
			err = pe.Err // its text names the path again
		}
		return "cannot be looked at: " + err.Error()
	case !fi.Mode().IsRegular():
		return "is not a regular file"
	case fi.Mode().Perm()&0o111 == 0:
		return "is not executable"
	}
	return ""
}

// checksumProblem says, when the executable at path does not have the
// SHA-256 sum (lower-case hex) the config pins, what it has instead; ""
// when it has it or cannot be read (commandProblem says why).
func checksumProblem(path, sum string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return "has sha256 " + got + ", not the one sha256 pins"
	}
	return ""
}
