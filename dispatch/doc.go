// Package dispatch defines the contract between the drain engine and provider
// adapters: a Message (one delivery attempt of an outbox row), the Adapter
// interface that sends it, and the classified Result it returns.
//
// Adapters live in their own subpackages (webhook, stripe, pgtable, riverjob,
// natsjs, execplugin, mcp, kafka) and import this package, never the engine. The Registry
// maps configured adapter names to built adapters; dispatch/builtin is the one
// place that turns configuration into adapters.
package dispatch
