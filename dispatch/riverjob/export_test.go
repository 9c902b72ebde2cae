package riverjob

import "testing"

// NewTestDSN returns the DSN of a fresh database with River migrated into
// schema "river", for the external tests.
func NewTestDSN(t *testing.T) string { return newEnv(t, testSchema).dsn }
