package kafka

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// logger passes the client's warnings and errors to slog, and everything it
// logs when slog's debug level is on (a producer id refused, a connection
// opened, a request retried). The client never logs record contents or the
// SASL password.
type logger struct{ l *slog.Logger }

var _ kgo.Logger = logger{}

// Level implements kgo.Logger.
func (g logger) Level() kgo.LogLevel {
	if g.l.Enabled(context.Background(), slog.LevelDebug) {
		return kgo.LogLevelDebug
	}
	return kgo.LogLevelWarn
}

// Log implements kgo.Logger.
func (g logger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelInfo
	switch level {
	case kgo.LogLevelError:
		lv = slog.LevelError
	case kgo.LogLevelWarn:
		lv = slog.LevelWarn
	case kgo.LogLevelDebug:
		lv = slog.LevelDebug
	}
	g.l.Log(context.Background(), lv, "kafka client: "+msg, keyvals...)
}
