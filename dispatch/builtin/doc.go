// Package builtin is the one place that turns configured adapters into
// dispatch adapters: run, demo, bench and the integration tests all wire
// adapters through Build, so they behave the same.
//
// It imports every adapter package, each of which registers its type
// (dispatch.RegisterKind): its settings, their rules and how it is built
// live in the adapter's own package (settings.go there). Build runs each
// type's Configure for every adapter (the runtime config built and
// validated, nothing connected: a config `drainer check` accepts passes
// it), then starts them, fills in key_ttl (the config's, the provider's,
// else the type's default) and locates every error at the adapter's line
// in the config file.
//
// Files: builtin.go builds and starts the adapters and settles key_ttl;
// window.go reads again, every WindowRefresh (a minute by default), the
// idempotency window of each provider that reported one at start
// (dispatch.KeyTTLer), so that a window changed while the daemon runs
// reaches the key-TTL guard (Entry.SetProviderWindow, Entry.KeyTTLFor)
// within that interval; a shortening is warned about once, naming the
// adapter and both windows, and a failed reading keeps the last window.
// These loops are goroutines of the Registry: its Close stops them before
// it closes the adapters.
package builtin
