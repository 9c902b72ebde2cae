package fleet

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/drainer-io/drainer/config"
)

// shutdown leaves (unless abandoned), lets every database go and, once
// their pools have closed, publishes their release: the others take them
// then, not while this replica still holds their connections.
func (f *Fleet) shutdown(mem *membership) {
	// A replica whose membership never answered has no row to delete and
	// published nothing to release.
	if !f.abandon.Load() && mem.ensured {
		lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := mem.leave(lctx); err != nil {
			f.log.Warn("fleet: could not leave the membership; the others take over when it expires", "err", redact(err))
		}
		cancel()
		defer func() {
			lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := mem.releaseAll(lctx); err != nil {
				f.log.Warn("fleet: could not publish the release of this replica's databases; the others take them a lease after it left", "err", redact(err))
			}
		}()
	}
	f.mu.Lock()
	f.closing = true
	for _, e := range f.entries {
		if !e.stopping {
			e.stopping = true
			e.cancel()
		}
	}
	f.mu.Unlock()
	f.wg.Wait()
	f.log.Info("fleet left", "member", f.cfg.MemberID, "abandoned", f.abandon.Load())
}

// heartbeat renews the membership, creating its tables first until they
// exist, and reports whether it answered. On failure the last known
// members are kept: none before the first answer, so that the replica
// drains every listed database as a fleet of one meanwhile.
func (f *Fleet) heartbeat(ctx context.Context, mem *membership) bool {
	start := time.Now()
	// A beat renews the membership when it runs, however late: it is cut
	// only once this replica's membership would have expired anyway.
	bctx, cancel := context.WithTimeout(ctx, f.ttl())
	var members, expired []string
	err := mem.ensure(bctx)
	if err == nil {
		members, expired, err = mem.beat(bctx, f.ttl())
	}
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			f.membershipFailed(mem, err)
		}
		return false
	}
	if mem.failing {
		mem.failing = false
		f.log.Info("fleet membership answers again; sharing the databases with the members seen",
			"coordination_database", f.cfg.CoordinationName, "members", len(members))
	}
	f.m.members.Set(float64(len(members)))
	f.mu.Lock()
	if !slices.Equal(members, f.members) {
		f.log.Info("fleet members changed", "members", len(members), "was", len(f.members))
	}
	for _, m := range f.members {
		if slices.Contains(expired, m) {
			// Its databases move here or elsewhere now; if it is alive
			// after all (beats too slow on a loaded host), two replicas
			// drain them until it beats again.
			f.m.expiries.Inc()
			f.log.Warn("fleet member expired: its heartbeats stopped; its databases move", "member", m)
		}
	}
	f.members = members
	f.mu.Unlock()
	// The backlog is published, and the fleet's read back for the
	// console's overview, after the membership, which it must never delay
	// (a late beat makes this replica look dead): it shares the one
	// coordination connection, so it is skipped when the beat itself was
	// slow and bounded to half a heartbeat (a lock on the table cuts it on
	// the server at half that, keeping the connection). A skipped or cut
	// one only makes the overview a beat older: it keeps the last read
	// (and a hand-over waits a beat longer for the release it publishes).
	if time.Since(start) >= f.cfg.Heartbeat/2 {
		return true
	}
	bound := f.cfg.Heartbeat / 2
	pctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	bl, err := f.publish(pctx, mem.pool, bound/2)
	if err != nil {
		if ctx.Err() == nil {
			f.m.coordErrors.Inc()
			f.log.Warn("fleet: publishing the databases' backlog failed; the console shows the last read",
				"coordination_database", f.cfg.CoordinationName, "err", redact(err))
		}
		return true
	}
	f.overview.store(bl, time.Now())
	return true
}

// membershipFailed logs and counts a failed membership statement (the
// tables' creation or a heartbeat), naming the coordination database: in
// drainer_fleet_heartbeat_errors_total and, when the coordination
// database is a listed one, in its drainer_fleet_database_errors_total.
func (f *Fleet) membershipFailed(mem *membership, err error) {
	mem.failing = true
	f.m.coordErrors.Inc()
	f.mu.Lock()
	known := len(f.members)
	if f.labelled[f.cfg.CoordinationName] {
		f.m.dbErrors.WithLabelValues(f.cfg.CoordinationName, startFailure(err)).Inc()
	}
	f.mu.Unlock()
	what := "fleet heartbeat failed; keeping the last known members"
	if !mem.ensured {
		what = "fleet membership tables could not be created or read"
	}
	if known == 0 {
		what += "; draining every listed database as a fleet of one until the membership answers"
	}
	f.log.Error(what, "coordination_database", f.cfg.CoordinationName, "members", known, "err", redact(err))
}

// list reads the databases; a failing Source keeps the last known list.
func (f *Fleet) list(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, max(f.cfg.Refresh, 5*time.Second))
	dbs, err := f.cfg.Source(lctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		f.m.catalogErrors.Inc()
		f.log.Error("listing databases failed; draining the last known list", "err", redact(err), "known", len(dbs))
		if dbs == nil {
			return
		}
	}
	seen := map[string]bool{}
	byTarget := map[string]string{} // the database a URL reaches → the first name listing it
	targets := make(map[string]string, len(dbs))
	kept := make([]Database, 0, len(dbs))
	for _, db := range dbs {
		if db.Name == "" || seen[db.Name] {
			f.log.Warn("database listed twice or without a name; ignored", "database", db.Name)
			continue
		}
		target, known := f.targets[db.URL]
		if !known {
			target = targetOf(db.URL)
		}
		targets[db.URL] = target
		if target != "" {
			if first, dup := byTarget[target]; dup {
				// Drained under both names, it would hold twice the
				// connections and be counted twice on every dashboard.
				f.log.Warn("database listed under two names (their URLs reach the same database); the second is ignored",
					"database", db.Name, "same_as", first)
				continue
			}
			byTarget[target] = db.Name
		}
		seen[db.Name] = true
		kept = append(kept, db)
	}
	f.targets = targets // (read and written by list only)
	f.mu.Lock()
	f.dbs, f.listed = kept, true
	f.labelListedLocked()
	f.mu.Unlock()
	f.pools.keep(kept)
	f.m.databases.WithLabelValues(stateKnown).Set(float64(len(kept)))
}

// reconcile starts an engine for each database newly assigned here and
// lets go of each database no longer assigned (or listed). A database
// still being let go is started again once that is done.
func (f *Fleet) reconcile() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return
	}
	members := f.members
	if !slices.Contains(members, f.cfg.MemberID) {
		members = append(slices.Clone(members), f.cfg.MemberID)
	}
	want := map[string]Database{}
	forced := map[string]bool{}
	for _, db := range f.dbs {
		if f.cfg.Force != nil && f.cfg.Force(db.Name) {
			want[db.Name], forced[db.Name] = db, true
		} else if Owner(members, db.Name) == f.cfg.MemberID {
			want[db.Name] = db
		}
	}
	f.budget.setShare(len(want))
	for name, e := range f.entries {
		if db, ok := want[name]; (!ok || db.URL != e.db.URL) && !e.stopping {
			e.stopping = true
			e.cancel()
		}
	}
	for name := range f.waiting {
		if _, ok := want[name]; !ok {
			delete(f.waiting, name)
		}
	}
	for name, u := range f.unwritten {
		if _, ok := want[name]; !ok && f.entries[name] == nil {
			f.log.Warn("database let go with completions its engine could not write: their rows are reclaimed at lease expiry and sent again with the same key",
				"database", name, "rows", len(u))
			delete(f.unwritten, name)
		}
	}
	held := f.heldElsewhere(members)
	now := time.Now()
	for name, db := range want {
		if _, ok := f.entries[name]; ok {
			continue
		}
		// A hand-over: the pool opens once the replica that held the
		// database has let it go (its release published), so that one
		// replica at a time holds its connections. A lease at most: a
		// replica that cannot publish it is taken over all the same.
		if holder, ok := held[name]; ok && !forced[name] {
			since, seen := f.waiting[name]
			if !seen {
				f.waiting[name] = now
				f.log.Info("database assigned here; waiting for the replica holding it to let it go", "database", name, "holder", holder)
				continue
			}
			if now.Sub(since) < f.cfg.Lease {
				continue
			}
			f.log.Warn("database still held by another replica a lease after it was assigned here; draining it all the same (claims, leases and fencing keep each row exactly-once)",
				"database", name, "holder", holder)
		}
		delete(f.waiting, name)
		delete(f.released, name)
		ctx, cancel := context.WithCancel(context.Background())
		e := &entry{db: db, cancel: cancel, done: make(chan struct{})}
		e.state.Store(stateStarting)
		f.entries[name] = e
		f.states[stateStarting]++
		f.wg.Add(1)
		go f.drain(ctx, e)
	}
	f.m.databases.WithLabelValues(stateOwned).Set(float64(len(want)))
	f.countStatesLocked()
}

// heldElsewhere maps each database that another replica holds, as the last
// read of fleet_databases says, to that replica: one this replica sees
// alive whose row is not released, or one that left and is still letting
// it go (stopping).
func (f *Fleet) heldElsewhere(members []string) map[string]string {
	f.overview.mu.Lock()
	rows := f.overview.rows
	f.overview.mu.Unlock()
	out := map[string]string{}
	for _, b := range rows {
		if b.Member == f.cfg.MemberID || b.State == stateReleased {
			continue
		}
		if b.State == stateStopping || (b.MemberAlive && slices.Contains(members, b.Member)) {
			out[b.Name] = b.Member
		}
	}
	return out
}

// countStatesLocked sets the unreachable, schema_mismatch and waiting
// gauges.
func (f *Fleet) countStatesLocked() {
	f.m.databases.WithLabelValues(stateUnreachable).Set(float64(f.states[stateUnreachable]))
	f.m.databases.WithLabelValues(stateSchemaMismatch).Set(float64(f.states[stateSchemaMismatch]))
	f.m.databases.WithLabelValues(stateWaiting).Set(float64(len(f.waiting)))
}

func (f *Fleet) setState(e *entry, s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := e.state.Swap(s).(string)
	if f.entries[e.db.Name] == e {
		f.states[old]--
		f.states[s]++
	}
	f.countStatesLocked()
}

// signal asks the main loop to reconcile soon.
func (f *Fleet) signal() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// targetOf is the database url reaches (its hosts, ports and database
// name), or "" when it cannot be parsed (its start then fails, naming why).
func targetOf(url string) string {
	if strings.TrimSpace(url) == "" {
		return "" // refused at its start, naming why
	}
	pc, err := config.ParseDatabaseURL(url)
	if err != nil {
		return ""
	}
	cc := pc.ConnConfig
	target := fmt.Sprintf("%s:%d", cc.Host, cc.Port)
	for _, fb := range cc.Fallbacks {
		target += fmt.Sprintf(",%s:%d", fb.Host, fb.Port)
	}
	return target + "/" + cc.Database
}
