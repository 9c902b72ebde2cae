// Package fleet drains many databases with one fleet of `drainer run`
// replicas (the config's `databases:`): each database is drained by the
// one replica that rendezvous hashing over the live members assigns it to,
// with an engine of its own (package drainer) on a pool of its own.
// Correctness never depends on the assignment: two replicas draining one
// database (a member that expired though alive) are kept exactly-once by
// the claims' leases and fencing, as two replicas of one database always
// are. Connections are bounded by construction: a replica opens a
// database's pool only within its budget, and only once the replica that
// held the database has released it.
//
// Files:
//
//   - fleet.go: Config, Fleet and its loop (Run, Relist).
//   - loop.go: the loop's steps: heartbeat, read the database list
//     (Source; at once on Relist), reconcile (start engines for databases
//     newly assigned here once no other live replica holds them, let go of
//     the others), leave on shutdown.
//   - conns.go: the coordination connection (OpenCoordination, a pool of
//     one, shared with the catalog by the caller), the loop's: the
//     heartbeat, the bounded publication after a beat, the list; and the
//     databases' pools, whose connections close only once the server has
//     closed its end (dialAwaitingClose).
//   - budget.go: the replica's budget of pools (its share: the databases
//     assigned to it).
//   - adapters.go: Reload and the generations of shared adapters: each
//     engine's routing is counted until it releases it (Routing.Release), and
//     a replaced generation is closed once the count reaches zero.
//   - assign.go: Owner and Assign, the pure rendezvous (highest-random-
//     weight) assignment.
//   - members.go: the membership table <schema>.fleet_members in the
//     coordination database, heartbeats with an expiry on the database
//     clock; leaving marks this replica's databases stopping. The
//     statements on both fleet tables are in package store (store/fleet.go).
//     While the coordination database does not answer (from startup, or
//     later) the replica keeps its last known members, none at first: it
//     then drains every listed database as a fleet of one, and each
//     heartbeat tries again (loop.go).
//   - backlogs.go: <schema>.fleet_databases in the coordination database:
//     each replica publishes the backlog and state of the databases it
//     drains after its heartbeat (its engines' last snapshot, skipped when
//     the beat was slow, cut at half a heartbeat), stopping while it lets
//     one go and released once its pool has closed (the hand-over), and
//     reads the whole fleet's back in the same round trip; Backlogs answers
//     the console from that read, kept in memory, at no connection's cost.
//   - pools.go: the console's connections to one database's pages (Pool),
//     each a pool of one opened on first use and closed when idle. A
//     replaced pool is closed in the background, never holding up the loop.
//   - database.go: one database's life: a pool from the budget, a start
//     slot (a few engines start at once), connect, check the schema, start
//     its engine (PollOnly, shared adapters, metrics labelled with the
//     database), retry with backoff while it cannot (unreachable,
//     schema_mismatch, start_timeout), stop it when let go (its calls under
//     way finish) and release it. Completions the stopped engine could not
//     write (its url changed: credentials rotated) are handed to the next
//     engine on the database here, which writes them before it reclaims.
//   - metrics.go: the fleet's collectors (drainer_fleet_*) and the
//     registerer that lets a database's metrics be unregistered.
package fleet
