// Package console is drainer's operator console (docs/reference.md §10):
// a web console served by `drainer run --console-addr ADDR` from the binary
// itself. Pages are server-rendered html/template documents with one small
// embedded script (assets/static/app.js) that polls the JSON API to keep
// the overview live; no asset is fetched from anywhere else, so it works
// in an air-gapped cluster, and it starts in milliseconds.
//
// The JSON API under /api/v1/ (rows, row, run, stats, pauses, actions)
// uses the column names of docs/reference.md §2. The pages are rendered
// from the same functions the API answers with, and every action goes
// through package ops, the code of the CLI's operator commands, audited
// with the actor ("console:<name>").
//
// # Security
//
// Read-only unless Config.Actions. Actions then need the token: as
// `Authorization: Bearer <token>` (the actor from X-Drainer-Actor), or a
// session opened with it at /login (cookie HttpOnly, SameSite=Strict,
// Secure under TLS; a per-session CSRF token in every form or in
// X-CSRF-Token). Every POST from another site (Sec-Fetch-Site, Origin) is
// refused; no action is taken by GET; logins are rate-limited per client
// address; the token is compared in constant time. Filters travel as
// query parameters and enter SQL only as placeholders; payloads are never
// logged, and a payload or response larger than 64 KiB is shown truncated.
// Every answer carries a Content-Security-Policy without inline script.
//
// # Databases
//
// Every query takes a database parameter naming one of Config.Databases
// (the first by default); the header shows a selector when there is more
// than one. Until the fleet of many databases is built, the overview's
// sampler measures the first database only, and links between pages do not
// carry the parameter.
//
// # Files
//
//	console.go   Config, Server, Start (an *AddrInUseError when the address is
//	             taken), the routes, the security headers
//	auth.go      the token, sessions, login rate limit, cross-site check, actor
//	api.go       the read API: rows (filters, search, keyset pages), row, run
//	actions.go   POST /api/v1/actions/{verb}, login and logout
//	stats.go     the sampler: backlog by status and tool, rates, history
//	pages.go     page handlers, template functions, the backlog chart
//	assets/      layout and page templates; static/ app.js and app.css
package console
