// Package daemon wires a drain engine for `drainer run` (and `drainer demo`):
// config, adapters, database pool, metrics and health server, reload on
// SIGHUP, and the ordered shutdown of docs/reference.md §3.
//
// # Files
//
//	daemon.go   Options, ConfigError, Run: settings merged; health and metrics
//	            server, adapters, pool, schema (waited for with backoff), engine;
//	            cleanup, last first
//	database.go connect: the pool, its URL checked, retried with backoff while
//	            the database is unreachable; closePool, bounded at exit;
//	            redactDSNError
//	vacuum.go   warnNoVacuum: a warning at start when autovacuum is off on the
//	            server or on a table of the schema (retention's deletes would
//	            never be vacuumed); in a fleet, the first time each
//	            database's engine starts (warnNoVacuumOnce, fleet.go)
//	reload.go   reload: SIGHUP loads the config again; a bad one is refused
//	gateway.go  the MCP gateway (package gateway) on --gateway-addr or
//	            gateway.addr: its tools listed from the mcp adapters with routes
//	fleet.go    runFleet: with databases:, one fleet (internal/fleet) drains every
//	            database the catalog lists, on shared adapters; the membership
//	            lives in the catalog database, else the first static one by name;
//	            reloadFleet: SIGHUP with databases: (new adapters for every
//	            engine, the catalog swapped when databases: changed)
//	fleetconsole.go
//	            startFleetConsole: the console of the whole fleet, each
//	            database's breakers and holds those of its engine here
//	            (engineAdapters, read from the engines' metrics), the routes
//	            and adapters those of the config in force (fleetRouting)
//	console.go  the operator console (internal/console) on --console-addr or
//	            console.addr: its address taken first, served once the pool is up
//	health.go   readyz: 503 while starting/stopping or the database is down;
//	            200 otherwise, naming the adapters that cannot send
//	routing.go  NewRouting: config to the engine's Routing (routes, gate policies,
//	            retention, compensations, the alert route)
//	tracing.go  newTracer: spans exported over OTLP when an OTEL_EXPORTER_OTLP
//	            endpoint is set
package daemon
