package demo

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
)

// openLog sends the daemon's logs to a file unless opts.Logger is set, and
// names the file on the first line of the output: what the demo prints
// stays progress and human text. name is the file's name, in opts.LogDir
// or else in a new temporary directory. The returned func closes the file.
func openLog(opts *Options, name string) (func(), error) {
	if opts.Logger != nil {
		return func() {}, nil
	}
	dir := opts.LogDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "drainer-demo-"); err != nil {
			return nil, fmt.Errorf("demo log file: %w", err)
		}
	}
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("demo log file: %w", err)
	}
	opts.Logger = slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{ReplaceAttr: readableDurations}))
	fmt.Fprintf(opts.Out, "logs: %s\n", path)
	return func() { _ = f.Close() }, nil
}

// readableDurations renders a time.Duration attribute with its String
// method ("30s", not a count of nanoseconds), as the daemon's logs do.
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}
