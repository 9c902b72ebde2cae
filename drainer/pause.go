package drainer

import (
	"context"
	"time"

	"github.com/drainer-io/drainer/internal/maintenance"
	"github.com/drainer-io/drainer/store"
)

// pauseSet is the set of paused routes and adapters, as last read.
type pauseSet = store.Pauses

func paused(p *pauseSet, route *Route, adapter string) bool {
	return p.Routes[route.Tool] || p.Adapters[adapter]
}

// pauseInterval is how often every replica reads the pauses table.
const pauseInterval = 2 * time.Second

// pausedRecheck is how long rows of a paused target wait between looks; a
// resume wakes them at once.
const pausedRecheck = time.Minute

// pauseWatcher keeps the pause set fresh, so every replica obeys `drainer
// pause` within seconds, and wakes the rows of what was resumed.
func (e *Engine) pauseWatcher() *maintenance.Loop {
	return maintenance.Periodic("pause watcher", maintenance.Every(pauseInterval), nil, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		sent := time.Now()
		set, err := e.st.ReadPauses(ctx, e.pool)
		switch {
		case err == nil:
			old := e.pauses.Swap(&set)
			if tools := e.resumedTools(old, &set); len(tools) > 0 {
				e.deferrer.wake(tools)
			}
		case !isShutdown(ctx, err) && e.db.failed("pause watcher", sent, err):
			e.log.Warn("reading pauses failed; keeping the last known set", "err", err)
		}
	})
}

// resumedTools lists the tools a change from old to set resumed: routes no
// longer paused, and the routes of adapters no longer paused.
func (e *Engine) resumedTools(old, set *pauseSet) []string {
	var tools []string
	for tool := range old.Routes {
		if !set.Routes[tool] {
			tools = append(tools, tool)
		}
	}
	for _, r := range e.routing.Load().Routes {
		if old.Adapters[r.Adapter] && !set.Adapters[r.Adapter] {
			tools = append(tools, r.Tool)
		}
	}
	return tools
}

// stillPaused reports whether tool's route or adapter is paused in the
// pause set as last read.
func (e *Engine) stillPaused(tool string) bool {
	route, ok := e.routing.Load().Routes[tool]
	return ok && paused(e.pauses.Load(), route, route.Adapter)
}
