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
package builtin
