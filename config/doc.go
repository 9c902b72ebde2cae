// Package config loads and validates the drainer configuration file (YAML).
//
// Load (or Parse, for bytes already read) returns a *Config with defaults
// applied, or an Errors listing every problem at once, sorted by line. Each
// Error renders as
//
//	FILE:LINE:COL: field.path: message
//
// where LINE is the line of the offending key or value and field.path is
// dotted: adapters.payments.timeout, routes.charge_card.backoff.cap,
// adapters.payments.headers.Authorization, adapters.events.servers[0]. A
// YAML syntax error has no field path; a file that cannot be read has no
// line. Unknown fields are errors anywhere, with a "did you mean" when a
// valid key is close.
//
// # Adapters
//
// config holds an adapter's envelope only: its name, type, timeout,
// breaker, rate_limit, max_concurrency and key_ttl (Adapter), and the
// routes. Every other key of an adapter belongs to its type: the adapter's
// package (dispatch/webhook, dispatch/kafka, …) defines the struct its keys
// decode into (Adapter.Settings) and checks it (dispatch.Settings.Check),
// and registers the type with dispatch.RegisterKind, the one table `drainer
// check` and `drainer run` share; the field paths of its errors become
// FILE:LINE:COL here. config imports no adapter package.
//
// # References
//
// ${env:NAME} and ${file:/absolute/path} expand inside YAML strings, as the
// whole value or part of it ("Bearer ${env:TOKEN}"); a file's content loses
// one trailing newline; $${ writes a literal ${. Expansion is one pass. An
// unset variable or unreadable file is an error, or in check mode
// (LoadOptions.Check, for `drainer check`) a warning in Config.Warnings with
// the value left empty and unchecked. Messages quote references as written
// and never an expanded value.
//
// # Secrets
//
// Secret values never sit in the config text: header values whose name
// holds auth, secret, token, key, password, signature, session, cookie or
// credential (wire.SensitiveHeader; not Idempotency-Key); every Secret field
// (api_key); the password of a connection string or URL (database_url, dsn,
// the urls of databases:, a nats server); and the value of a query
// parameter named like a credential (wire.CredentialParam: api_key, token,
// sig, …) in an http or mcp adapter's url, a detect url or a route's query
// must come from a reference. An adapter's settings mark such fields with a
// secret:"…" struct tag (see package dispatch/wire); messages name the
// field, and the parameter, never the value. Secret fields have the type
// Secret, which prints as <redacted>.
//
// In check mode an adapter's checks also see wire.Checker.CheckMode: what
// they can only look at on this machine (a plugin's executable) is a
// warning there, as an unset ${env:X} is.
//
// # Defaults
//
// Fields left unset (or null) get the Default* constants after validation:
// workers 16, lease 30s, unrouted_recheck 15s, adapter timeout 10s, breaker
// 5 failures / 30s, max_attempts 10, backoff 1s / 10m / max_retry_after 1h,
// class key_idempotent, ordering none, critical true, databases.refresh 30s. An explicit zero where
// a default exists is an error, except max_retry_after: 0s, which is kept
// (Retry-After then adds no floor). key_ttl stays 0 when unset: the adapter
// type's default applies (see dispatch.KeyTTLer).
//
// # Many databases
//
// databases: (databases.go) lists the databases one fleet drains: static
// entries {name, url} and/or a catalog query; it excludes database_url in
// the same file. Each url keeps its text as written, so
// DatabaseEntry.ResolveURL reads its ${file:…} and ${env:…} again (rotated
// credentials) without reloading the config.
//
// YAML anchors, aliases and merge keys (<<: *base) work; errors in merged
// fields point at the anchored text.
package config
