package drainer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/compensations"
	"github.com/drainer-io/drainer/internal/maintenance"
	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
)

// Config configures an Engine. Zero values take the defaults of WithDefaults.
type Config struct {
	// Schema holds the outbox (default "drainer").
	Schema string
	// ReplicaID names this process in leases (default host:pid).
	ReplicaID string
	// Workers bounds rows leased and dispatched at once (required: `drainer
	// run` passes the config's workers, whose default config.Load applies).
	Workers int
	// MaxInFlightBytes bounds the payload bytes of the rows leased and not
	// yet sent (default DefaultMaxInFlightBytes): a claim takes, of the
	// rows due, those whose payloads fit what is left, and the claim loop
	// waits for workers to finish while nothing is left. A claim always
	// takes its first due row, so a row larger than the bound still goes
	// out, and the payloads in flight exceed the bound by one row at most.
	MaxInFlightBytes int64
	// BatchSize bounds rows per claim (default min(Workers, 256)): larger
	// claims spread a claim's fixed cost over more rows, while one claim
	// stays a short transaction.
	BatchSize int
	// Lease is how long a claimed row belongs to this replica (default 30s).
	// A dispatch's deadline is the lease minus LeaseMargin.
	Lease time.Duration
	// PollInterval is the claim poll when no notification arrives (default 1s).
	PollInterval time.Duration
	// GateWait is the longest a row waits in its worker for a slot of its
	// adapter's max_concurrency or for its rate token before it is turned
	// away (default gateWaitMax; negative: never waits).
	GateWait time.Duration
	// ScopeHold is how long the rows queued behind a scope's row of a tool
	// ordered per business_scope are held out of the claims' way (default
	// DefaultScopeHold): the longest a scope's next row waits when the
	// release that follows its predecessor's completion is missed
	// (drainer/scopehold.go).
	ScopeHold time.Duration
	// FetchCooldown lets freed slots accumulate before the next claim under
	// load (default 2ms).
	FetchCooldown time.Duration
	// ReclaimInterval is how often expired leases are looked for (default 2s).
	ReclaimInterval time.Duration
	// RotateInterval is how often the queue's generations are rotated
	// (default 5s): settled rows leave by truncation (drainer/rotation.go).
	RotateInterval time.Duration
	// Rotation sizes the generations (default store.DefaultRotation).
	Rotation store.Rotation
	// SnapshotInterval is how often the backlog snapshot is refreshed (default 10s).
	SnapshotInterval time.Duration
	// SagaInterval is how often open sagas are advanced (default 1s); a
	// completion that concerns a saga advances it at once.
	SagaInterval time.Duration
	// CompleteBatch bounds completions per write (default 256).
	CompleteBatch int
	// CompleteLinger lets completions accumulate before a write, so one
	// commit records many rows (default 5ms). A completion's row is not
	// held: its worker slot is already free.
	CompleteLinger time.Duration
	// Logger receives the engine's logs (default: discard).
	Logger *slog.Logger
	// Metrics receives the engine's metrics (required: NewMetrics).
	Metrics *Metrics
	// Seed seeds the jitter source; 0 seeds randomly.
	Seed uint64
	// LeaseMargin is kept between a dispatch's deadline and its lease expiry
	// (default 5s).
	LeaseMargin time.Duration
	// Tracer records a span per attempt, continuing the agent's trace
	// (default: no-op; traceparent is still passed through).
	Tracer trace.Tracer
	// PollOnly opens no connection of the engine's own (no LISTEN, no wake
	// gate): the pool is all it holds, and due rows are found by the poll.
	// A fleet draining many databases bounds its connections so.
	PollOnly bool
	// SharedAdapters leaves the routing's adapters open on Stop and Reload:
	// their owner (a fleet's one registry for every database) closes them,
	// told by Routing.Release when this engine is done with a routing.
	SharedAdapters bool
	// Inherited are completions an earlier engine on this database
	// answered and could not write (Engine.Unwritten after its Stop: its
	// pool lost the database, its credentials rotated). Start writes them
	// before it reclaims or claims anything, so a row whose call was
	// answered is settled by that answer rather than sent again; those the
	// database cannot take yet are kept and tried again with this engine's
	// own.
	Inherited []store.Completion
	// Settled, when set, is told the rows of announcing routes
	// (Route.Announce: the MCP gateway's) that a completion of this engine
	// settled, right after it committed: each row's key and, when it
	// succeeded with a tool result, the state the completion wrote
	// (store.Settle). It must not block.
	Settled func([]store.Settle)
}

// DefaultMaxInFlightBytes is Config.MaxInFlightBytes's default (the
// config's max_in_flight_bytes).
const DefaultMaxInFlightBytes = 32 << 20

// maxDefaultBatch caps the default BatchSize.
const maxDefaultBatch = 256

// DefaultLeaseMargin is kept between a dispatch's deadline and its lease expiry.
const DefaultLeaseMargin = 5 * time.Second

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Schema = cmp.Or(c.Schema, migrations.DefaultSchema)
	if c.ReplicaID == "" {
		host, _ := os.Hostname()
		c.ReplicaID = fmt.Sprintf("%s:%d", cmp.Or(host, "drainer"), os.Getpid())
	}
	c.BatchSize = cmp.Or(c.BatchSize, min(c.Workers, maxDefaultBatch))
	c.MaxInFlightBytes = cmp.Or(c.MaxInFlightBytes, DefaultMaxInFlightBytes)
	c.Lease = cmp.Or(c.Lease, 30*time.Second)
	c.PollInterval = cmp.Or(c.PollInterval, time.Second)
	c.GateWait = cmp.Or(c.GateWait, gateWaitMax)
	c.ScopeHold = cmp.Or(c.ScopeHold, DefaultScopeHold)
	c.FetchCooldown = cmp.Or(c.FetchCooldown, 2*time.Millisecond)
	c.ReclaimInterval = cmp.Or(c.ReclaimInterval, 2*time.Second)
	c.RotateInterval = cmp.Or(c.RotateInterval, 5*time.Second)
	c.Rotation.FlipRows = cmp.Or(c.Rotation.FlipRows, store.DefaultRotation.FlipRows)
	c.Rotation.IdleRows = cmp.Or(c.Rotation.IdleRows, store.DefaultRotation.IdleRows)
	c.Rotation.FlipAge = cmp.Or(c.Rotation.FlipAge, store.DefaultRotation.FlipAge)
	c.Rotation.Chunk = cmp.Or(c.Rotation.Chunk, store.DefaultRotation.Chunk)
	c.Rotation.MoveFor = cmp.Or(c.Rotation.MoveFor, store.DefaultRotation.MoveFor)
	c.SnapshotInterval = cmp.Or(c.SnapshotInterval, 10*time.Second)
	c.CompleteBatch = cmp.Or(c.CompleteBatch, 256)
	c.CompleteLinger = cmp.Or(c.CompleteLinger, 5*time.Millisecond)
	c.SagaInterval = cmp.Or(c.SagaInterval, time.Second)
	c.LeaseMargin = cmp.Or(c.LeaseMargin, DefaultLeaseMargin)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	if err := migrations.ValidateSchema(c.Schema); err != nil {
		errs = append(errs, err)
	}
	if c.Workers < 1 || c.Workers > 4096 {
		errs = append(errs, fmt.Errorf("workers (%d) must be between 1 and 4096", c.Workers))
	}
	if c.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("batch size (%d) must be positive", c.BatchSize))
	}
	if c.MaxInFlightBytes < 1 {
		errs = append(errs, fmt.Errorf("max in-flight bytes (%d) must be positive", c.MaxInFlightBytes))
	}
	if c.Lease <= c.LeaseMargin {
		errs = append(errs, fmt.Errorf("lease (%s) must exceed the lease margin (%s)", c.Lease, c.LeaseMargin))
	}
	if c.Metrics == nil {
		errs = append(errs, errors.New("metrics must be set (NewMetrics)"))
	}
	return errors.Join(errs...)
}

// Engine drains one outbox schema. Start it once; Stop it once (Stop before
// Start, or twice, is harmless).
type Engine struct {
	cfg     Config
	pool    *pgxpool.Pool
	st      *store.Store
	log     *slog.Logger
	metrics *Metrics
	routing atomic.Pointer[Routing]

	active atomic.Int64
	// inFlightBytes sums the payloads of the rows whose workers run
	// (Config.MaxInFlightBytes).
	inFlightBytes atomic.Int64
	// takeMu: Lease holds it shared while it leases and starts a worker;
	// Stop takes it once claiming stopped, before it waits for the workers.
	takeMu   sync.RWMutex
	wake     chan struct{}
	reloaded chan struct{} // a reload swapped the routing
	// batchFree is signalled when a full claim batch of slots is free.
	batchFree chan struct{}

	fetchCtx    context.Context // cancelled first on Stop: no new claims
	fetchCancel context.CancelFunc
	workCtx     context.Context // cancelled when the shutdown grace runs out
	workCancel  context.CancelFunc

	claimDone    chan struct{} // closed when the claim loop has exited
	gate         *wakeGate     // the claim loop's slot of the wake gate
	listening    chan struct{} // closed once the listener first listens
	listenedOnce sync.Once
	hooks        wakeHooks // tests' stops in the wake-up
	mark         lowWater  // the claim loop's low-water mark
	floor        wakeFloor // what the other loops tell the mark
	// slotsWanted says the claim loop waits for free slots: finishing
	// workers wake it.
	slotsWanted atomic.Bool
	wakeWhy     atomic.Uint32 // why the claim loop was woken (wakeFor)
	// staleSlotWakes counts the wakes by a worker that finished during a
	// claim that then found too few rows, which the loop skips.
	staleSlotWakes atomic.Uint64
	claims         claimCounts    // rows claimed, by cause (ClaimedRows)
	witness        pollWitness    // a poll's rows, until their cause is known
	retries        retryWakes     // timers for the retries this engine scheduled
	workers        sync.WaitGroup // one per leased row
	loops          sync.WaitGroup // claimer, completer
	maint          maintenance.Group
	completer      *completer

	rngMu sync.Mutex
	rng   *rand.Rand

	gatesMu    sync.Mutex
	gates      map[string]*gate
	gatePolicy map[string]GatePolicy
	pauses     atomic.Pointer[pauseSet]
	backlog    atomic.Pointer[backlog] // the last snapshot read (Backlog)
	deferrer   *deferrer
	holds      *scopeHolds
	sagas      *compensations.Runner

	started, stopped atomic.Bool
	// stopBy is when Stop must be done writing (unix ns; 0: no deadline):
	// its context's deadline and stopWriteMargin (stopDeadline). writes,
	// the context of every completion write, is cancelled then.
	stopBy     atomic.Int64
	writes     context.Context
	stopWrites context.CancelFunc
	unrouted   unroutedLog
	tracer     trace.Tracer
	db         *dbHealth // one line when the database goes down, one when back
}

// New builds an engine on pool for the given routing.
func New(pool *pgxpool.Pool, routing *Routing, cfg Config) (*Engine, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("engine config: %w", err)
	}
	if routing == nil {
		return nil, errors.New("engine: routing must not be nil")
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	e := &Engine{
		cfg:       cfg,
		pool:      pool,
		st:        store.MustNew(cfg.Schema),
		log:       cfg.Logger,
		metrics:   cfg.Metrics,
		wake:      make(chan struct{}, 1),
		reloaded:  make(chan struct{}, 1),
		batchFree: make(chan struct{}, 1),
		claimDone: make(chan struct{}),
		tracer:    cfg.Tracer,
		db:        newDBHealth(cfg.Logger),
		rng:       rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
	if e.tracer == nil {
		e.tracer = defaultTracer()
	}
	e.gatePolicy = map[string]GatePolicy{}
	e.pauses.Store(&pauseSet{})
	e.attachGates(routing)
	e.attachDetectors(routing)
	e.routing.Store(routing)
	e.metrics.InitAdapters(routing.Registry.Names())
	states := e.AdapterStates
	e.metrics.adapterStates.Store(&states)
	e.metrics.Workers.Set(float64(cfg.Workers))
	e.fetchCtx, e.fetchCancel = context.WithCancel(context.Background())
	e.workCtx, e.workCancel = context.WithCancel(context.Background())
	e.completer = newCompleter(e)
	e.retries = retryWakes{e: e, timers: map[int64]*retryTimer{}}
	e.gate, e.listening = newWakeGate(e), make(chan struct{})
	e.writes, e.stopWrites = context.WithCancel(context.Background())
	e.deferrer = newDeferrer(e)
	e.holds = newScopeHolds(e)
	e.sagas = compensations.NewRunner(compensations.RunnerConfig{
		Pool: pool, Store: e.st, SweepInterval: cfg.SagaInterval, Logger: cfg.Logger, Queued: func() { e.wakeFor(causeSignal) },
		DBFailed: e.db.failed,
		Routing: func() (compensations.Map, bool) {
			rt := e.routing.Load()
			return rt.Compensations, rt.CompensationFailedAlert != ""
		},
	})
	return e, nil
}

// Config returns the engine's effective configuration.
func (e *Engine) Config() Config { return e.cfg }

// Routing returns the routing in force.
func (e *Engine) Routing() *Routing { return e.routing.Load() }

// Start checks the schema and starts the engine's loops. It returns once they run.
func (e *Engine) Start(ctx context.Context) error {
	if !e.started.CompareAndSwap(false, true) {
		return errors.New("engine already started")
	}
	if _, err := migrations.Check(ctx, e.pool, e.cfg.Schema); err != nil {
		e.started.Store(false)
		return err
	}
	set, err := e.st.ReadPauses(ctx, e.pool)
	if err != nil {
		e.started.Store(false)
		return err
	}
	e.pauses.Store(&set)
	// Before anything is scraped from this engine, so the counters never
	// go from 0 to the database's total (a false increase).
	if err := e.readEnqueueCounters(ctx); err != nil {
		e.started.Store(false)
		return err
	}
	// An earlier engine's answers first: the reclaimer must not find
	// their rows without them.
	e.completer.inherit(ctx, e.cfg.Inherited)
	// Maintenance first, in this order; Stop stops it last, in reverse.
	services := []maintenance.Service{e.sagas, e.deferrer.service(), e.holds.service()}
	if !e.cfg.PollOnly {
		services = append(services, e.listener(), e.gate.service())
	}
	services = append(services, e.pauseWatcher(), e.reclaimer(), e.snapshotter(), e.pruner(), e.rotator(), e.calibrator())
	if err := e.maint.Start(ctx, services...); err != nil {
		e.started.Store(false)
		return err
	}
	if !e.cfg.PollOnly {
		e.awaitWakeUp(ctx)
	}
	e.loops.Add(2)
	go e.completer.run()
	go e.claimLoop()
	e.log.Info("engine started", "schema", e.cfg.Schema, "replica", e.cfg.ReplicaID,
		"workers", e.cfg.Workers, "lease", e.cfg.Lease)
	return nil
}

// Reload swaps in a new routing. Rows leased before keep the old one until
// they complete; the old adapters are closed once no claim or attempt uses
// them.
func (e *Engine) Reload(rt *Routing) {
	e.attachGates(rt)
	e.attachDetectors(rt)
	old := e.routing.Swap(rt)
	select {
	case e.reloaded <- struct{}{}:
	default:
	}
	e.metrics.InitAdapters(rt.Registry.Names())
	e.wakeNewlyRouted(old, rt)
	e.signalFull()
	if old == nil || old == rt {
		return
	}
	if e.cfg.SharedAdapters {
		// The adapters are not the engine's to close: their owner hears
		// when this engine is done with the old routing.
		if old.Release != nil {
			old.retire(old.Release)
		}
		return
	}
	if old.Registry == rt.Registry {
		return
	}
	old.retire(func() {
		if err := old.Registry.Close(context.Background()); err != nil {
			e.log.Warn("closing replaced adapters", "err", err)
		}
	})
}

// useRouting returns the routing in force, recorded as used until done.
func (e *Engine) useRouting() *Routing {
	for {
		rt := e.routing.Load()
		if rt.use() {
			return rt
		}
	}
}

// wakeNewlyRouted makes rows that were waiting for a route due now (their
// not_before floor still holds), so a reload that adds their route drains
// them at once rather than at their next unrouted recheck: rows never
// attempted, and rows attempted before their route was removed.
func (e *Engine) wakeNewlyRouted(old, rt *Routing) {
	var tools []string
	for tool := range rt.Routes {
		if old == nil || old.Routes[tool] == nil {
			tools = append(tools, tool)
		}
	}
	e.deferrer.wake(tools)
}

func (e *Engine) jitterRand() *rand.Rand { return e.rng }

// sleep waits for d or until ctx is done; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// isShutdown reports whether err is the expected result of stopping.
func isShutdown(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}
