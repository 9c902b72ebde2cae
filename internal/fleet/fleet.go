package fleet

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Database is one database the fleet drains: Name appears in logs and in
// the database label, URL (a secret) never does.
type Database struct {
	Name string
	URL  string
}

// Source lists the databases to drain. A list returned with an error means
// "the catalog is down; this is the last known list": the fleet keeps
// draining it. An error without a list keeps the fleet's previous one.
type Source func(ctx context.Context) ([]Database, error)

// Config configures a Fleet. Zero values take the defaults noted.
type Config struct {
	// MemberID names this replica in the membership and in leases
	// (default host:pid:random).
	MemberID string
	// Source lists the databases (required).
	Source Source
	// CoordinationURL is the database holding the membership table
	// (required unless Coordination is set): the catalog database when
	// there is one, else the first static database by name.
	CoordinationURL string
	// Coordination, when set, is the coordination connection
	// (OpenCoordination), opened and closed by the caller, who shares it
	// with the catalog when the catalog's database is the coordination
	// database: a replica then holds one connection there, not two. Run
	// uses it from one goroutine, a statement at a time (heartbeat, list,
	// publication). Nil: Run opens its own to CoordinationURL.
	Coordination *pgxpool.Pool
	// CoordinationName names the coordination database in logs (default
	// "the coordination database"; never its url): the static entry's
	// name, or the catalog's. When it names a listed database, a failed
	// membership statement also counts in that database's
	// drainer_fleet_database_errors_total.
	CoordinationName string
	// Schema holds each database's outbox, and the membership table in the
	// coordination database (default "drainer").
	Schema string
	// Lease bounds how long a dead replica's databases wait for a new owner
	// (default 30s): heartbeats every Lease/6, a member expires
	// Lease - Heartbeat after its last one (five heartbeats), and the
	// others notice at their next heartbeat. A replica whose beats are slow
	// (a loaded host) so stays a member through four that fail.
	Lease time.Duration
	// Heartbeat overrides Lease/6; it must be under Lease/2.
	Heartbeat time.Duration
	// Refresh is how often Source is read (default 30s).
	Refresh time.Duration
	// PoolConns is the size of each database's pool (default 2, at most
	// 16), fixed before it opens. Engines run PollOnly, so the pool is
	// every connection a database costs: a replica holds at most
	// 1 + PoolConns × the databases assigned to it (budget).
	PoolConns int32
	// StopTimeout is the grace of an engine when the replica shuts down
	// (default 10s): calls under way finish or are cut off, rows not sent
	// go back to pending, and any left in flight are reclaimed by lease. A
	// database moving to another replica is given at least the engine's
	// lease, so that its calls under way finish.
	StopTimeout time.Duration
	// StartTimeout bounds one attempt to start a database's engine
	// (connect, check the schema, start), counted once the attempt has its
	// start slot (default 30s: generous, since a busy host is slow, and an
	// attempt cut short only starts again later).
	StartTimeout time.Duration
	// Engine is each database's engine configuration: Workers bounds rows
	// in flight per database (required). Schema, ReplicaID, Logger,
	// Metrics, PollOnly and SharedAdapters are set by the fleet.
	Engine drainer.Config
	// Checked, when set, is called each time a database's schema has been
	// checked, before its engine starts, with the database's pool (the
	// daemon's warnings about the database's settings). ctx is the start's:
	// it ends with StartTimeout.
	Checked func(ctx context.Context, name string, pool *pgxpool.Pool)
	// Routing returns a routing for one more engine, over adapters shared
	// by every database (required). Reload replaces it.
	Routing func() *drainer.Routing
	// CloseAdapters closes the adapters Routing builds on. The fleet calls
	// it once, after Run has returned or a Reload replaced them, when no
	// engine's claim or attempt uses them any more (nil: nothing to close).
	CloseAdapters func()
	// Registerer receives the fleet's metrics and, labelled with
	// database, each engine's (default: a private registry).
	Registerer prometheus.Registerer
	Version    string
	Logger     *slog.Logger
	// PoolIdle is how long a connection of Pool (the console's pages of
	// one database) stays open unused (default 1m): an unused console
	// holds no connection.
	PoolIdle time.Duration
	// Force, when set, makes this replica drain the databases it returns
	// true for whatever the assignment says, without waiting for another
	// replica to let them go (tests: a deliberate overlap).
	Force func(name string) bool
	// Known names the databases listed before Source is first read (the
	// config's static entries): their labelled series exist from New.
	Known []string
}

// Fleet drains the databases Source lists that rendezvous hashing over the
// live members assigns to this replica, one engine per database.
type Fleet struct {
	cfg      Config
	log      *slog.Logger
	store    *store.Store // the fleet's tables in the coordination database
	m        *metrics
	abandon  atomic.Bool
	kick     chan struct{}
	relist   chan time.Duration
	wg       sync.WaitGroup
	joined   atomic.Bool   // while Run runs: Backlogs answers once a beat read the backlogs
	started  chan struct{} // closed once Run made its first assignment
	overview overview      // the backlogs the heartbeat last read: Backlogs' answer
	pools    lazyPools     // the console's connections to one database's pages

	budget *budget       // the pools this replica may hold
	starts chan struct{} // a slot per engine starting at once
	// retries holds a slot per start retried at once (startSlot)
	retries chan struct{}
	// targets maps each URL of the last list to the database it reaches
	// (list's, so that a long list is not parsed anew every refresh)
	targets map[string]string

	mu      sync.Mutex
	entries map[string]*entry
	// states counts entries by state (under mu), kept as each changes:
	// counting them anew on every change cost the square of the list.
	states  map[string]int
	members []string
	dbs     []Database
	listed  bool // Source answered at least once
	closing bool
	// waiting holds the databases assigned here that another live replica
	// still holds, since when: they start once it has let them go.
	waiting map[string]time.Time
	// released holds the databases let go here whose release is not yet
	// published in fleet_databases.
	released map[string]bool
	// labelled holds the databases whose series are initialised.
	labelled map[string]bool
	// unwritten holds, by database, the completions an engine let go here
	// could not write (its pool lost the database: credentials rotated,
	// the url changed): the next engine on it here writes them first
	// (drainer.Config.Inherited). Dropped once the database is assigned
	// elsewhere or unlisted; its rows are then reclaimed and sent again
	// with the same key.
	unwritten map[string][]store.Completion

	// gmu orders reloads against engines starting and stopping.
	gmu     sync.Mutex
	gen     *generation // the adapters engines start on; nil once Run is over
	engines map[*drainer.Engine]struct{}
}

// entry is one database this replica drains, or is letting go.
type entry struct {
	db       Database
	cancel   context.CancelFunc             // lets the database go
	state    atomic.Value                   // string: starting, running, unreachable, schema_mismatch
	eng      atomic.Pointer[drainer.Engine] // while running: its backlog is published
	stopping bool                           // under Fleet.mu
	done     chan struct{}
}

// New checks cfg and returns a fleet ready to Run.
func New(cfg Config) (*Fleet, error) {
	if cfg.Source == nil || cfg.Routing == nil || (cfg.CoordinationURL == "" && cfg.Coordination == nil) {
		return nil, errors.New("fleet: Source, Routing and CoordinationURL (or Coordination) are required")
	}
	if cfg.Coordination != nil && cfg.Coordination.Config().MaxConns != 1 {
		return nil, fmt.Errorf("fleet: the coordination pool holds %d connections; it must hold one (OpenCoordination)",
			cfg.Coordination.Config().MaxConns)
	}
	cfg.Schema = cmp.Or(cfg.Schema, migrations.DefaultSchema)
	if err := migrations.ValidateSchema(cfg.Schema); err != nil {
		return nil, err
	}
	if cfg.Engine.Workers < 1 {
		return nil, fmt.Errorf("fleet: workers per database (%d) must be positive", cfg.Engine.Workers)
	}
	if cfg.MemberID == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		cfg.MemberID = fmt.Sprintf("%s:%d:%s", cmp.Or(host, "drainer"), os.Getpid(), hex.EncodeToString(b[:]))
	}
	cfg.Lease = cmp.Or(cfg.Lease, 30*time.Second)
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, cfg.Lease/6)
	if cfg.Heartbeat <= 0 || 2*cfg.Heartbeat >= cfg.Lease {
		return nil, fmt.Errorf("fleet: heartbeat (%s) must be positive and under half the lease (%s)", cfg.Heartbeat, cfg.Lease)
	}
	cfg.Refresh = cmp.Or(cfg.Refresh, 30*time.Second)
	cfg.CoordinationName = cmp.Or(cfg.CoordinationName, "the coordination database")
	cfg.PoolConns = cmp.Or(cfg.PoolConns, 2)
	if cfg.PoolConns < 1 || cfg.PoolConns > maxPoolConns {
		return nil, fmt.Errorf("fleet: connections per database (%d) must be between 1 and %d", cfg.PoolConns, maxPoolConns)
	}
	cfg.StopTimeout = cmp.Or(cfg.StopTimeout, 10*time.Second)
	cfg.StartTimeout = cmp.Or(cfg.StartTimeout, 30*time.Second)
	cfg.PoolIdle = cmp.Or(cfg.PoolIdle, time.Minute)
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	drainer.RegisterBuildInfo(cfg.Registerer, cfg.Version) // once for the process, not per database
	f := &Fleet{cfg: cfg, log: cfg.Logger, store: store.MustNew(cfg.Schema), m: newMetrics(cfg.Registerer),
		kick: make(chan struct{}, 1), started: make(chan struct{}), relist: make(chan time.Duration, 1), entries: map[string]*entry{}, states: map[string]int{},
		gen: newGeneration(cfg.Routing, cfg.CloseAdapters), engines: map[*drainer.Engine]struct{}{},
		pools: lazyPools{idle: cfg.PoolIdle}, budget: newBudget(), starts: make(chan struct{}, startConcurrency), retries: make(chan struct{}, startConcurrency/2),
		waiting: map[string]time.Time{}, released: map[string]bool{}, labelled: map[string]bool{},
		unwritten: map[string][]store.Completion{}}
	f.labelLocked(cfg.Known)
	return f, nil
}

// maxPoolConns bounds Config.PoolConns.
const maxPoolConns = 16

// ttl is how long a heartbeat keeps this replica a member.
func (f *Fleet) ttl() time.Duration { return f.cfg.Lease - f.cfg.Heartbeat }

// ID is this replica's member id.
func (f *Fleet) ID() string { return f.cfg.MemberID }

// Abandon makes Run return without deleting the membership row, as a
// killed process would: the others take its databases once it expires.
func (f *Fleet) Abandon() { f.abandon.Store(true) }

// Draining returns the databases whose engine runs here, sorted.
func (f *Fleet) Draining() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for name, e := range f.entries {
		if !e.stopping && e.state.Load() == stateRunning {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Databases returns the names of the databases listed now (the catalog's
// list as last read), sorted.
func (f *Fleet) Databases() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.dbs))
	for _, db := range f.dbs {
		out = append(out, db.Name)
	}
	slices.Sort(out)
	return out
}

// Unsettled returns how many databases are waiting for another replica to
// let them go, starting, retrying or being let go here: zero once this
// replica drains exactly its share.
func (f *Fleet) Unsettled() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.waiting)
	for _, e := range f.entries {
		if e.stopping || e.state.Load() != stateRunning {
			n++
		}
	}
	return n
}

// Started is closed once Run has made its first assignment: its engines
// start (each database on its own, retried while it cannot), whether the
// membership answered or the replica drains as a fleet of one.
func (f *Fleet) Started() <-chan struct{} { return f.started }

// Run drains until ctx is cancelled, then leaves the membership (so the
// others take over at once) and stops every engine, each within
// StopTimeout. It returns an error only when it could not start.
//
// A coordination database that does not answer never holds the databases
// back: until the membership answers (its tables created, a heartbeat
// renewed), the replica knows no other member and drains every listed
// database as a fleet of one, as it keeps its last known members when the
// coordination database is lost later; each heartbeat tries again, and the
// first that answers shares the databases with the members it sees.
func (f *Fleet) Run(ctx context.Context) error {
	defer f.retireAdapters()
	// The coordination connection is the loop's: the membership's
	// statements, the bounded publication after a beat (which reads the
	// whole fleet's backlogs back for the console's overview, Backlogs, so
	// that it costs no connection) and, when the caller shares it with
	// the catalog, the catalog query, one after the other.
	coord := f.cfg.Coordination
	if coord == nil {
		var err error
		if coord, err = OpenCoordination(f.cfg.CoordinationURL, nil); err != nil {
			return err
		}
		defer store.ClosePool(coord, poolCloseWait)
	}
	defer f.pools.closeAll(f.cfg.StopTimeout)
	mem := newMembership(coord, f.store, f.cfg.MemberID)
	f.joined.Store(true)
	defer f.joined.Store(false)
	f.log.Info("fleet joining", "member", f.cfg.MemberID, "coordination_database", f.cfg.CoordinationName,
		"lease", f.cfg.Lease, "heartbeat", f.cfg.Heartbeat, "refresh", f.cfg.Refresh)
	beat := time.NewTicker(f.cfg.Heartbeat)
	defer beat.Stop()
	refresh := time.NewTicker(f.cfg.Refresh)
	defer refresh.Stop()
	// Two beats before the first assignment: replicas starting together
	// see each other, rather than each taking every database for a beat.
	// When the first fails, the second would not see them either: the
	// replica drains at once, alone, until the membership answers.
	answered := f.heartbeat(ctx, mem)
	f.list(ctx)
	if answered && sleep(ctx, min(f.cfg.Heartbeat, 3*time.Second)) {
		f.heartbeat(ctx, mem)
	}
	if ctx.Err() != nil {
		f.shutdown(mem)
		return nil
	}
	f.reconcile()
	close(f.started)
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-beat.C:
			f.heartbeat(ctx, mem)
			if f.mu.Lock(); !f.listed {
				f.mu.Unlock()
				f.list(ctx) // no list yet: ask again at every beat
			} else {
				f.mu.Unlock()
			}
			f.reconcile()
		case <-refresh.C:
			f.list(ctx)
			f.reconcile()
		case <-f.kick:
			f.reconcile()
		case d := <-f.relist:
			if d > 0 && d != f.cfg.Refresh {
				f.log.Info("fleet refresh changed", "refresh", d, "was", f.cfg.Refresh)
				f.cfg.Refresh = d
				refresh.Reset(d)
			}
			f.list(ctx)
			f.reconcile()
		}
	}
	f.shutdown(mem)
	return nil
}

// Relist makes Run read Source again now (a reload swapped what it
// reads), then every refresh (0 keeps the period).
func (f *Fleet) Relist(refresh time.Duration) {
	for {
		select {
		case f.relist <- refresh:
			return
		case <-f.relist: // an earlier request not yet served: this one replaces it
		}
	}
}
