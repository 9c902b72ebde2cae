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
// # Actions
//
// A rows view is its filters and its search box, read once into a
// selection (selection.go): the list, a bulk action's dry run and the
// action take their rows from it, so a bulk action acts on exactly the
// rows the view holds (its first maxBulkRows in seq order), never more.
// The dry run lists every row it would change and keeps them; its Confirm
// names the dry run and acts on those rows only, each while it still
// matches the view, and at most once. Every action's POST is answered by a
// 303 to its answer's own page (/results/{id}, /api/v1/results/{id} for
// JSON), kept in memory for an hour (results.go), so a reload never acts
// again. Each action is logged with its actor and target: the key, the
// pause, or the view and the number of rows.
//
// # Security
//
// Read-only unless Config.Actions. Actions then need the token: as
// `Authorization: Bearer <token>` (the actor from X-Drainer-Actor), or a
// session opened with it at /login (cookie HttpOnly, SameSite=Strict,
// Secure under TLS; a per-session CSRF token in every form or in
// X-CSRF-Token). Every POST from another site (Sec-Fetch-Site, Origin) is
// refused; no action is taken by GET; logins are rate-limited per client
// address; the token is compared in constant time. Login's next and a
// form's back are confined to paths of the console (localPath). Filters
// travel as query parameters and enter SQL only as placeholders; payloads
// (and a payload filter's value) are never logged, and a payload or
// response larger than 64 KiB is shown truncated.
// Every answer carries a Content-Security-Policy without inline script.
//
// # Databases
//
// Every query takes a database parameter naming one of the databases shown
// (the first by default; an unknown one is a 404 naming it); the header
// shows a selector when there is more than one. Then every link between
// pages and every action's form carries the parameter (pageData.Link, the
// "dbfield" template), so that a page of database B never leads to A's.
//
// Without a fleet the databases are Config.Databases and the sampler
// measures the first. With a fleet (Config.Fleet: databases: in the config)
// the list is the fleet's current one, read at each request, and the
// console keeps no connection to any drained database: the overview (rows
// by status, by database, the chart) is the sum of the backlogs each
// replica publishes in <schema>.fleet_databases, which the console's
// replica reads back at each heartbeat in the round trip of its own
// publication and keeps in memory (fleet.Backlogs, sampled every few
// seconds): it costs no connection, not even to the coordination database.
// One database's pages, its overview (?database=NAME: its counts, work by
// tool, pauses) and the actions go through fleet.Pool, a pool of one
// connection opened on first use and closed after a minute unused. So an
// idle console adds nothing to the fleet's 2·D + 2·R connections, and one
// in use one per database being looked at.
//
// Breakers, holds and dispatch rates are per engine in a fleet: one
// database's overview shows those of its engine on this replica
// (Config.EngineAdapters; the rates of the series labelled with its
// database), or says that this replica does not drain it and which does,
// never another database's; the whole fleet's shows every engine of this
// replica, each naming its database. Pauses live in each database: the
// whole fleet's overview and /pauses read every database's (fleetview.go:
// at most every ten seconds, through the same one-connection pools), each
// naming its database, and name a database that could not be read rather
// than say nothing is paused. An action naming no database, when there
// are several, acts on a key where the key is (refused when it is in more
// than one, or a database could not be read) and is refused otherwise,
// never tried in the first. A pause naming a route or adapter the config
// in force does not know (Config.Names) is refused with the closest name.
//
// Nor do a fleet's rows pages default to the first database when none is
// named (fleetrows.go): a key looked up (its page, GET /api/v1/rows/{key},
// the search box) is read where it is, found in several it lists each
// one's row (the API: a 409 naming them), in none a 404 naming every
// database searched. The rows list, its API and the parked rows hold every
// database's rows, each naming its database: each database reads at most
// a page of its view after its own position (keyset on its seq), the page
// merges them oldest first, and its next_cursor holds each database's
// position. A database that could not be read is named on the page and in
// databases_unread, the others shown. A bulk action acts in one database.
//
// # Files
//
//	console.go   Config, Fleet, Server, Start (an *AddrInUseError when the
//	             address is taken), the routes, the security headers, the
//	             database a request names
//	auth.go      the token, sessions, login rate limit, cross-site check,
//	             actor, the next address, login and logout
//	api.go       the read API: rows (keyset pages of a view), row, run
//	selection.go a view's rows: its filters and search, read once
//	actions.go   POST /api/v1/actions/{verb}: bulk actions, Confirm, the
//	             answers' pages
//	fields.go    the fields each action takes (any other is refused), and
//	             its boolean flags
//	results.go   the answers kept for their pages, and dry runs' plans
//	stats.go     the sampler: backlog by status and tool (and by database in
//	             a fleet), rates (by database too), history; one fleet
//	             database's overview
//	fleetview.go what a fleet's console reads of several databases: every
//	             database's pauses, the databases holding a key, the
//	             database an action acts on; each engine's adapters
//	fleetrows.go a fleet's rows with no database named: a key where it is,
//	             every database's rows merged into one page (cursor), their
//	             pages (rows, row, parked)
//	pages.go     page handlers, template functions, Link
//	chart.go     the backlog chart, with its axes
//	lasterror.go a row's last_error on the pages: a fault, or flow control
//	             (an adapter at its cap) shown as information
//	assets/      layout and page templates; static/ app.js and app.css
package console
