package drainer

import (
	"context"
	"time"

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

// pauseLoop keeps the pause set fresh, so every replica obeys `drainer pause`
// within seconds.
func (e *Engine) pauseLoop() {
	defer e.loops.Done()
	t := time.NewTicker(pauseInterval)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(e.fetchCtx, 10*time.Second)
		set, err := e.st.ReadPauses(ctx, e.pool)
		cancel()
		switch {
		case err == nil:
			old := e.pauses.Swap(&set)
			if tools := e.resumedTools(old, &set); len(tools) > 0 {
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
