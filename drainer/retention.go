package drainer

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"time"

	"github.com/drainer-io/drainer/internal/maintenance"
	"github.com/drainer-io/drainer/store"
)

// RetentionPolicy says what retention prunes and when. Tombstones are kept
// longer than any provider's idempotency window, so a late re-enqueue is
// never sent twice.
type RetentionPolicy struct {
	Enabled  bool
	Interval time.Duration
	store.Retention
}

// pruner prunes on every replica's schedule; one replica at a time does
// the work (an advisory lock), the others skip that round.
func (e *Engine) pruner() *maintenance.Loop {
	interval := func() time.Duration { return cmp.Or(e.routing.Load().Retention.Interval, time.Minute) }
	var told time.Duration
	return maintenance.Periodic("pruner", interval, nil, func(ctx context.Context) {
		if p, ok := e.retention(e.routing.Load(), &told); ok {
			e.pruneOnce(ctx, p)
		}
	})
}

// retention is the pass rt's policy asks for, if any: with tombstones kept
// at least as long as the longest key_ttl of rt's routes
// (keptTombstones). The first pass that keeps them longer than the policy
// says, and each change of how long, is logged (told: the last logged).
func (e *Engine) retention(rt *Routing, told *time.Duration) (RetentionPolicy, bool) {
	p := rt.Retention
	if !p.Enabled {
		return p, false
	}
	if kept, tool := rt.keptTombstones(); kept > p.Tombstones {
		if kept != *told {
			e.log.Warn("tombstones kept longer than retention.tombstones: a route's key_ttl is longer (a window its provider reported)",
				"retention_tombstones", p.Tombstones.String(), "kept", kept.String(), "tool_name", tool)
			*told = kept
		}
		p.Tombstones = kept
	}
	return p, true
}

// keptTombstones is the longest key_ttl that applies to a route of rt
// (dispatch.Entry.KeyTTLFor: the route's, its adapter's, or the window its
// provider reported) and that route's tool. A tombstone must outlive its
// key at the provider (docs/reference.md §2), and a window read from a
// provider is known only at run time, so the pruner keeps tombstones at
// least that long whatever retention.tombstones says; the config's own
// key_ttls and its types' defaults are checked against it at load.
func (rt *Routing) keptTombstones() (time.Duration, string) {
	var longest time.Duration
	var where string
	for _, tool := range slices.Sorted(maps.Keys(rt.Routes)) {
		r := rt.Routes[tool]
		entry, ok := rt.Registry.Get(r.Adapter)
		if !ok {
			continue
		}
		if ttl := entry.KeyTTLFor(r.KeyTTL); ttl > longest {
			longest, where = ttl, tool
		}
	}
	return longest, where
}

// pruneOnce runs one retention pass, on one replica at a time. Its budget
// is a minute of statements; each pruning batch is bounded by
// p.BatchTimeout, and an audit rotation step, whose work grows with its
// generation, runs to its end (store.RotateAudit): only a shutdown ends
// it. A bound on the whole pass once ended every anchoring of a
// generation past a few million entries at the same point, and the audit
// stopped rotating.
func (e *Engine) pruneOnce(ctx context.Context, p RetentionPolicy) {
	sent := time.Now()
	var pruned map[string]int
	_, err := e.st.WithRetentionLock(ctx, e.pool, func(db store.BeginDB) error {
		var err error
		pruned, err = e.st.Prune(ctx, db, p.Retention, time.Minute)
		return err
	})
	for kind, n := range pruned {
		if kind != "run" && n > 0 {
			e.metrics.PrunedRows.WithLabelValues(kind).Add(float64(n))
		}
	}
	switch {
	case err != nil && !isShutdown(ctx, err):
		if e.db.failed("retention", sent, err) {
			e.log.Warn("retention pass failed", "err", err)
		}
	case len(pruned) > 0:
		e.log.Debug("retention pass", "pruned", pruned)
	}
}
