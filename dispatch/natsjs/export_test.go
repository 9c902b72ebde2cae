package natsjs

import (
	"testing"
	"time"
)

// NewTestStream creates a stream with the given duplicate window on the
// shared test server, removed when t ends, and returns the server's URL and
// a subject the stream captures, for the external tests.
func NewTestStream(t *testing.T, duplicates time.Duration) (url, subject string) {
	e := newNATSEnv(t, sharedServer(t))
	subject = e.prefix + ".intents"
	e.createStream(t, streamSpec{subjects: []string{subject}, duplicates: duplicates})
	return e.url, subject
}
