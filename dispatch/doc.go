// Package dispatch defines the contract between the drain engine and provider
// adapters: a Message (one delivery attempt of an outbox row), the Adapter
// interface that sends it, and the classified Result it returns.
//
// Adapters live in their own subpackages (webhook, stripe, pgtable, riverjob,
// natsjs, execplugin, mcp, kafka) and import this package, never the engine
// nor package config. Each registers its adapter type with RegisterKind
// (kind.go): the struct its config keys decode into (Settings) and their
// rules, the route keys it accepts, and how it is configured and started;
// config checks and builtin builds through this one table. An adapter that
// must reach its provider at startup starts through StartProbed (start.go):
// a provider not reachable yet leaves it connecting in the background
// (kafka and mcp their own way, the others with a Background) while its rows
// wait, answered NotReady. What
// adapters share (secrets, field errors, header rules, trace context,
// one-line text) is in dispatch/wire. The Registry maps configured adapter
// names to built adapters (registry.go) and owns the goroutines that keep
// a provider's idempotency window current (Entry.SetProviderWindow,
// Registry.Go: stopped by Close); dispatch/builtin is the one place that
// turns configuration into adapters.
package dispatch
