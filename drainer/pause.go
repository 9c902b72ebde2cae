package drainer

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// pauseSet is the set of paused routes and adapters, as last read.
type pauseSet struct {
	routes   map[string]bool
	adapters map[string]bool
}

func (p *pauseSet) paused(route *Route, adapter string) bool {
	return p.routes[route.Tool] || p.adapters[adapter]
}

// pauseInterval is how often every replica reads the pauses table.
const pauseInterval = 2 * time.Second

// pausedRecheck is how long rows of a paused target wait between looks; a
// resume wakes them at once.
const pausedRecheck = time.Minute

func loadPauses(ctx context.Context, q queryer, schema string) (*pauseSet, error) {
	rows, err := q.Query(ctx, fmt.Sprintf("SELECT target, name FROM %s.pauses", schema))
	if err != nil {
		return nil, fmt.Errorf("read pauses: %w", err)
	}
	set := &pauseSet{routes: map[string]bool{}, adapters: map[string]bool{}}
	var target, name string
	_, err = pgx.ForEachRow(rows, []any{&target, &name}, func() error {
		if target == "route" {
			set.routes[name] = true
		} else {
			set.adapters[name] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read pauses: %w", err)
	}
	return set, nil
}

// pauseLoop keeps the pause set fresh, so every replica obeys `drainer pause`
// within seconds.
func (e *Engine) pauseLoop() {
	defer e.loops.Done()
	t := time.NewTicker(pauseInterval)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(e.fetchCtx, 10*time.Second)
		set, err := loadPauses(ctx, e.pool, e.cfg.Schema)
		cancel()
		switch {
		case err == nil:
			old := e.pauses.Swap(set)
			if tools := e.resumedTools(old, set); len(tools) > 0 {
				e.deferrer.wake(tools)
			}
		case !isShutdown(e.fetchCtx, err):
			e.log.Warn("reading pauses failed; keeping the last known set", "err", err)
		}
		select {
		case <-e.fetchCtx.Done():
			return
		case <-t.C:
		}
	}
}

// resumedTools lists the tools a change from old to set resumed: routes no
// longer paused, and the routes of adapters no longer paused.
func (e *Engine) resumedTools(old, set *pauseSet) []string {
	var tools []string
	for tool := range old.routes {
		if !set.routes[tool] {
			tools = append(tools, tool)
		}
	}
	for _, r := range e.routing.Load().Routes {
		if old.adapters[r.Adapter] && !set.adapters[r.Adapter] {
			tools = append(tools, r.Tool)
		}
	}
	return tools
}
