package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/spf13/cobra"
)

// Log formats of --log-format.
const (
	logFormatJSON = "json"
	logFormatText = "text"
)

// logFlags are the root's --log-format and --log-level, which every command
// inherits: every command logs through one slog handler chosen by them.
type logFlags struct {
	format string
	level  string
	// cmd is the command being run, set before logger: errors name a flag
	// by where its value came from (see flagRef).
	cmd *cobra.Command
}

func addLogFlags(root *cobra.Command, l *logFlags) {
	pf := root.PersistentFlags()
	pf.StringVar(&l.format, "log-format", logFormatJSON, "log format of every command: json or text (env DRAINER_LOG_FORMAT)")
	pf.StringVar(&l.level, "log-level", "info", "debug, info, warn or error (env DRAINER_LOG_LEVEL)")
}

// logger builds the logger of a command writing to w; a bad flag is a usage
// error (exit 2).
func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, usagef("%s: %q is not one of debug, info, warn, error", flagRef(l.cmd, "log-level"), l.level)
	}
	log, err := newLogger(w, l.format, level)
	if err != nil {
		return nil, usagef("%s: %q is not json or text", flagRef(l.cmd, "log-format"), l.format)
	}
	return log, nil
}

// newLogger returns a logger of format (json or text) at level. Durations
// are written as Go durations ("30s", "1m30s"), not nanosecond counts.
func newLogger(w io.Writer, format string, level slog.Leveler) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: readableDurations}
	switch format {
	case logFormatJSON, "":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case logFormatText:
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, usagef("--log-format: %q is not json or text", format)
}

// readableDurations renders a time.Duration attribute with its String method.
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

type loggerKey struct{}

// withLogger returns ctx carrying log for the command about to run.
func withLogger(ctx context.Context, log *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, log)
}

// cmdLogger is the logger the root set up for cmd (see newRoot).
func cmdLogger(cmd *cobra.Command) *slog.Logger {
	if log, ok := cmd.Context().Value(loggerKey{}).(*slog.Logger); ok {
		return log
	}
	return slog.Default()
}
