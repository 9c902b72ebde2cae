package execplugin

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
)

// levelTrace is the slog level of hclog's Trace.
const levelTrace = slog.LevelDebug - 4

// hclogAdapter is an hclog.Logger writing to a *slog.Logger, for go-plugin:
// its own messages and the plugin's standard error lines (which go-plugin
// logs at the level a JSON line names, else at debug).
type hclogAdapter struct {
	log  *slog.Logger
	name string
	args []any
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func newHCLogAdapter(log *slog.Logger) *hclogAdapter { return &hclogAdapter{log: log} }

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return levelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (h *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	lvl := slogLevel(level)
	ctx := context.Background()
	if !h.log.Enabled(ctx, lvl) {
		return
	}
	all := make([]any, 0, 2+len(h.args)+len(args))
	if h.name != "" {
		all = append(all, "logger", h.name)
	}
	all = append(all, h.args...)
	all = append(all, args...)
	h.log.Log(ctx, lvl, msg, all...)
}

func (h *hclogAdapter) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hclogAdapter) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hclogAdapter) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hclogAdapter) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hclogAdapter) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hclogAdapter) enabled(l slog.Level) bool { return h.log.Enabled(context.Background(), l) }

func (h *hclogAdapter) IsTrace() bool { return h.enabled(levelTrace) }
func (h *hclogAdapter) IsDebug() bool { return h.enabled(slog.LevelDebug) }
func (h *hclogAdapter) IsInfo() bool  { return h.enabled(slog.LevelInfo) }
func (h *hclogAdapter) IsWarn() bool  { return h.enabled(slog.LevelWarn) }
func (h *hclogAdapter) IsError() bool { return h.enabled(slog.LevelError) }

func (h *hclogAdapter) ImpliedArgs() []any { return h.args }

func (h *hclogAdapter) With(args ...any) hclog.Logger {
	c := *h
	c.args = append(append([]any(nil), h.args...), args...)
	return &c
}

func (h *hclogAdapter) Name() string { return h.name }

func (h *hclogAdapter) Named(name string) hclog.Logger {
	if h.name != "" {
		name = h.name + "." + name
	}
	return h.ResetNamed(name)
}

func (h *hclogAdapter) ResetNamed(name string) hclog.Logger {
	c := *h
	c.name = name
	return &c
}

// SetLevel does nothing: the slog handler decides.
func (h *hclogAdapter) SetLevel(hclog.Level) {}

// GetLevel returns the lowest level the slog handler accepts; go-plugin
// skips the plugin's log lines below it without parsing them.
func (h *hclogAdapter) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if h.enabled(slogLevel(l)) {
			return l
		}
	}
	return hclog.Off
}

func (h *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return &lineLogger{log: h.log, level: slog.LevelInfo, source: h.name}
}

// lineLogger is an io.Writer that logs each line written to it. It is safe
// for concurrent use.
type lineLogger struct {
	log    *slog.Logger
	level  slog.Level
	source string

	mu  sync.Mutex
	buf []byte
}

// maxLogLine bounds one logged line of plugin output; a longer line is
// logged in pieces.
const maxLogLine = 64 << 10

func (w *lineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			if len(w.buf) <= maxLogLine {
				break
			}
			i = maxLogLine
			for i > maxLogLine-utf8.UTFMax && !utf8.RuneStart(w.buf[i]) {
				i-- // cut at a character boundary
			}
		}
		w.emit(w.buf[:i])
		if i < len(w.buf) && w.buf[i] == '\n' {
			i++
		}
		w.buf = w.buf[i:]
	}
	if len(w.buf) == 0 {
		w.buf = nil // do not keep a large array alive
	}
	return len(p), nil
}

func (w *lineLogger) emit(line []byte) {
	text := strings.TrimRight(strings.ToValidUTF8(string(line), "\uFFFD"), "\r")
	if strings.TrimSpace(text) == "" {
		return
	}
	w.log.Log(context.Background(), w.level, text, "logger", w.source)
}
