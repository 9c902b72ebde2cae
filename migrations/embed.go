// Package migrations holds drainer's schema as numbered, forward-only SQL files
// (embedded) and applies them with tern under an advisory lock, so any number
// of replicas may run `drainer migrate` at once.
//
// Migrations follow expand/contract: a release's daemon keeps working on the
// next release's schema. schema_meta.min_daemon_schema_version records the
// oldest schema version a daemon must know to work on the current schema.
package migrations

import "embed"

//go:embed *.sql
var files embed.FS
