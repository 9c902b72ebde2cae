// Command drainer drains a transactional outbox: see `drainer --help` and
// docs/reference.md §3 for every command. main stays thin: each command is a cobra
// command in a file of its own that parses flags and calls a domain package.
//
//   - root.go: the root command, the flag/environment precedence
//     (flag, DRAINER_<FLAG>, config file, default) and exit codes
//     (0 success, 1 runtime error, 2 usage or config error).
//   - signals.go: SIGTERM/SIGINT caught from main's first statement, so a
//     signal that reaches a process still starting stops `run` (and
//     `bench`) cleanly; other commands get the default behaviour back.
//   - logging.go: --log-format and --log-level, the one slog handler every
//     command logs through (durations written as 30s, 1m30s).
//   - run.go: `drainer run` (package internal/daemon); check.go: `drainer check`
//     (package config); migrate.go: `drainer migrate` (package migrations),
//     and `migrate --all` over every database of a databases: section.
//   - database.go: --database NAME with --config FILE, an alternative to
//     --database-url for every command that touches one database (package
//     internal/catalog looks up names the static list lacks).
//   - enqueue.go: `drainer enqueue` (package producer); payload.go: its
//     --payload JSON|@FILE|- and the position of invalid JSON.
//   - inspect.go, list.go, requeue.go, cancel.go, resolve.go, abort.go,
//     pause.go, audit.go, stats.go: the operator commands (package ops); output.go
//     renders their aligned tables and `--output json`.
//   - routes.go: `drainer routes import` (OpenAPI idempotency manifests).
//   - conformance.go: `drainer conformance` (package internal/conformance):
//     probes a provider endpoint for the replay contract.
//   - demo.go: `drainer demo` (package tooling/demo); bench.go: `drainer
//     bench` (package tooling/bench); version.go: `drainer version`.
package main
