package drainer

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/drainer-io/drainer/internal/maintenance"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
)

// scopeHolds is the engine's side of the scope holds of store/scopehold.go.
// When a claim leases the first open row of a scope of a tool ordered per
// business_scope, the rows queued behind it are held (one goroutine does it,
// never a worker, in the order asked; the claim is not delayed); when a
// completion lets go of a scope's row, the completer makes the scope's next
// row due before it wakes the claim loop (completer.nextInScope). A hold
// lasts Config.ScopeHold: a release that never comes (the row before it
// settled by an operator's cancel, an abort, or a crash between its
// completion and the release) delays the next row by at most that much.
//
// marks remembers, per scope, the last row a hold looked at, so that a
// scope's rows are looked at once per half hold, not once per row it sends:
// with a scope of n rows held at each of its n claims, the holds would cost
// n² row look-ups.
type scopeHolds struct {
	e *Engine

	mu    sync.Mutex
	asked []store.ScopeHold
	marks map[scopeID]scopeMark
	kick  chan struct{}
}

type scopeID struct{ tool, scope string }

// scopeMark is the last row a hold of the scope looked at, and when.
type scopeMark struct {
	last int64
	at   time.Time
}

// maxScopeMarks bounds marks: past it they are forgotten all at once (each
// scope's next hold then looks at its rows again).
const maxScopeMarks = 4096

// DefaultScopeHold is Config.ScopeHold's default.
const DefaultScopeHold = time.Minute

func newScopeHolds(e *Engine) *scopeHolds {
	return &scopeHolds{e: e, marks: map[scopeID]scopeMark{}, kick: make(chan struct{}, 1)}
}

// claimed asks for the rows behind row, just leased, to be held when its
// route orders its rows per business_scope. It never blocks.
func (h *scopeHolds) claimed(row *store.ClaimedRow, route *Route) {
	if route == nil || route.Ordering != outbox.OrderingBusinessScope {
		return
	}
	h.mu.Lock()
	h.asked = append(h.asked, store.ScopeHold{Tool: row.ToolName, Scope: row.BusinessScope, After: row.Seq})
	h.mu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// forget drops the marks of tools whose rows a wake made due: their held
// rows are due again and must be looked at by the next hold.
func (h *scopeHolds) forget(tools []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id := range h.marks {
		for _, t := range tools {
			if id.tool == t {
				delete(h.marks, id)
				break
			}
		}
	}
}

func (h *scopeHolds) service() *maintenance.Loop {
	return &maintenance.Loop{Name: "scope holds", Run: h.run}
}

func (h *scopeHolds) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.kick:
		}
		for ctx.Err() == nil {
			batch := h.next()
			if len(batch) == 0 {
				break
			}
			h.apply(ctx, batch)
		}
	}
}

// holdBatch bounds the scopes one hold statement looks at.
const holdBatch = 256

// next takes up to holdBatch of the holds asked for, one per scope, each
// starting past what the scope's last hold looked at while that is less
// than half a hold old.
func (h *scopeHolds) next() []store.ScopeHold {
	h.mu.Lock()
	defer h.mu.Unlock()
	var batch []store.ScopeHold
	at := map[scopeID]int{}
	n := 0
	for _, a := range h.asked {
		if len(batch) == holdBatch {
			break
		}
		n++
		id := scopeID{a.Tool, a.Scope}
		if m, ok := h.marks[id]; ok && time.Since(m.at) < h.e.cfg.ScopeHold/2 {
			a.After = max(a.After, m.last)
		}
		if i, ok := at[id]; ok {
			batch[i].After = max(batch[i].After, a.After)
			continue
		}
		at[id] = len(batch)
		batch = append(batch, a)
	}
	h.asked = h.asked[n:]
	if len(h.asked) == 0 {
		h.asked = nil
	}
	return batch
}

// apply runs one batch of holds and remembers what each looked at.
func (h *scopeHolds) apply(ctx context.Context, batch []store.ScopeHold) {
	e := h.e
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sent := time.Now()
	done, err := e.st.HoldScopes(ctx, e.pool, batch, e.cfg.ScopeHold)
	if err != nil {
		if !isShutdown(ctx, err) && e.db.failed("scope holds", sent, err) {
			e.log.Warn("holding the rows queued behind ordered scopes' rows failed; claims look past them until the next hold", "scopes", len(batch), "err", err)
		}
		return
	}
	var held int64
	h.mu.Lock()
	if len(h.marks)+len(done) > maxScopeMarks {
		clear(h.marks)
	}
	for _, d := range done {
		h.marks[scopeID{d.Tool, d.Scope}] = scopeMark{last: d.Last, at: sent}
		held += d.Held
	}
	h.mu.Unlock()
	if held > 0 {
		e.log.Debug("rows held behind their scopes' first rows", "scopes", len(batch), "rows", held)
	}
}

// releaseNext makes due the next row of each scope of batch's rows of
// ordered tools whose completions were written (lost: those that were
// not), lowers the claim's floor to each such row (it may lie behind the
// claim's low-water mark: a row queued after the scope's last hold keeps
// its old due time), and reports whether there was any.
func (c *completer) releaseNext(d store.Completed, batch []completion) bool {
	e := c.e
	var tools, scopes []string
	var seen map[scopeID]bool // made for the first ordered row: the completer's every batch comes here
	for i := range batch {
		x := &batch[i]
		if x.route == nil || x.route.Ordering != outbox.OrderingBusinessScope || x.row == nil || slices.Contains(d.Lost, x.Seq) {
			continue
		}
		if seen == nil {
			seen = map[scopeID]bool{}
		}
		id := scopeID{x.row.ToolName, x.row.BusinessScope}
		if !seen[id] {
			seen[id] = true
			tools, scopes = append(tools, id.tool), append(scopes, id.scope)
		}
	}
	if len(tools) == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	sent := time.Now()
	next, err := e.st.ReleaseScopes(ctx, e.pool, tools, scopes)
	if err != nil {
		if e.db.failed("scope holds", sent, err) {
			e.log.Warn("making the next rows of ordered scopes due failed; they go when their hold ends", "tools", tools, "err", err)
		}
		e.floor.wantFull() // their positions are not known
		return true
	}
	for _, p := range next {
		e.floor.lower(p) // the next claim starts no later than the scope's next row
	}
	return true
}
