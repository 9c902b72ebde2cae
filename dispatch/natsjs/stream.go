package natsjs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/drainer-io/drainer/dispatch"
)

// capturingStreams returns the names of the streams whose subjects overlap
// the adapter's subject ({tool_name} read as a wildcard), sorted.
func (a *Adapter) capturingStreams(ctx context.Context) ([]string, error) {
	lister := a.js.StreamNames(ctx, jetstream.WithStreamListSubject(a.subject.filter()))
	var names []string
	for name := range lister.Name() { // drained to the end: the lister's goroutine exits
		names = append(names, name)
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("list the streams capturing subject %q: %w", a.cfg.Subject, err)
	}
	slices.Sort(names)
	return names, nil
}

// checkStream checks, when Config.Stream is set, that the stream exists and
// captures the subject. Without it, a subject that no stream captures is
// an error with Config.RequireStream (the key TTL is read from that
// stream), and is only logged otherwise: every publish is then answered
// Retry (no_stream), without consuming attempts, until one does.
func (a *Adapter) checkStream(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	names, err := a.capturingStreams(ctx)
	if err != nil {
		return err
	}
	switch {
	case a.cfg.Stream == "" && len(names) == 0 && a.cfg.RequireStream:
		return errNoStream(a.cfg.Subject)
	case a.cfg.Stream == "" && len(names) == 0:
		a.cfg.Logger.Warn("no jetstream stream captures the subject; publishes will be retried until one does", "subject", a.cfg.Subject)
	case a.cfg.Stream != "" && !slices.Contains(names, a.cfg.Stream):
		if _, err := a.js.Stream(ctx, a.cfg.Stream); errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("stream %q does not exist", a.cfg.Stream)
		} else if err != nil {
			return fmt.Errorf("look up stream %q: %w", a.cfg.Stream, err)
		}
		return fmt.Errorf("stream %q does not capture subject %q (streams capturing it: %v)", a.cfg.Stream, a.cfg.Subject, names)
	}
	return nil
}

// errNoStream is the error of a subject no stream captures when key_ttl
// must be read from that stream.
func errNoStream(subject string) error {
	return fmt.Errorf("no jetstream stream captures subject %q, and key_ttl is not set (it defaults to that stream's duplicate window): create the stream, or set key_ttl", subject)
}

// KeyTTL returns the duplicate window of the stream that stores the
// adapter's messages, read from the server: Config.Stream's, or else that of
// the stream capturing the subject; with {tool_name} in the subject, the
// shortest window of all streams capturing any expansion. It fails if no
// stream captures the subject, and with dispatch.ErrUnavailable while a
// background start waits for the server.
func (a *Adapter) KeyTTL(ctx context.Context) (time.Duration, error) {
	if a.bg.Waiting() {
		return 0, dispatch.MarkUnavailable(errors.New("nats: no server has been reachable since startup: the stream's duplicate window cannot be read"))
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	names := []string{a.cfg.Stream}
	if a.cfg.Stream == "" {
		var err error
		if names, err = a.capturingStreams(ctx); err != nil {
			return 0, err
		}
		if len(names) == 0 {
			return 0, errNoStream(a.cfg.Subject)
		}
	}
	var ttl time.Duration
	for _, name := range names {
		s, err := a.js.Stream(ctx, name)
		if err != nil {
			return 0, fmt.Errorf("read stream %q: %w", name, err)
		}
		w := s.CachedInfo().Config.Duplicates
		if w <= 0 {
			return 0, fmt.Errorf("stream %q reports no duplicate window", name)
		}
		if ttl == 0 || w < ttl {
			ttl = w
		}
	}
	return ttl, nil
}
