package console

import (
	"log/slog"
	"sync"
	"time"
)

// sampleQuietFor is how often, at most, the console logs its failing
// backlog sample while it keeps failing: as each of the engine's
// subsystems does during a database outage (docs/operating.md), the
// engine's own two lines saying when it began and ended.
const sampleQuietFor = time.Minute

// sampleLog logs the backlog sampler's failures: the first failure at
// once, then at most one line per sampleQuietFor while the samples keep
// failing, and one line when a sample works again, saying for how long
// they had failed. The console has no access to the engine's outage
// tracker (it may run without an engine, or over a fleet), so it limits
// its own line.
type sampleLog struct {
	log *slog.Logger
	now func() time.Time

	mu     sync.Mutex
	since  time.Time // when the samples began to fail (zero: they work)
	logged time.Time // the last failure line
	missed int       // failures not logged since that line
}

func newSampleLog(log *slog.Logger, now func() time.Time) *sampleLog {
	return &sampleLog{log: log, now: now}
}

// failed records a failed sample and logs it unless a line was logged
// within sampleQuietFor.
func (l *sampleLog) failed(err error) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.since.IsZero() {
		l.since, l.logged, l.missed = now, now, 0
		l.log.Warn("console: backlog sample failed; retrying, logging at most once a minute until it works", "err", err)
		return
	}
	if now.Sub(l.logged) < sampleQuietFor {
		l.missed++
		return
	}
	l.log.Warn("console: backlog sample still failing", "err", err,
		"since", l.since.UTC(), "failed_since_last_line", l.missed+1)
	l.logged, l.missed = now, 0
}

// ok records a sample that worked: after failures, one line says so.
func (l *sampleLog) ok() {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.since.IsZero() {
		return
	}
	l.log.Info("console: backlog sample works again", "failing_for", now.Sub(l.since).Round(time.Second).String())
	l.since, l.missed = time.Time{}, 0
}
