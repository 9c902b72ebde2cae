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

// resumeLookBack is how far back an engine that starts looks for resumes
// (startResumes): a paused row is deferred for at most 1.5 pausedRecheck.
const resumeLookBack = 2 * pausedRecheck

// pauseWatcher keeps the pause set fresh, so every replica obeys `drainer
// pause` within seconds, and wakes the rows of what was resumed: what it
// saw resumed, and, at its first read, what was resumed before it started.
func (e *Engine) pauseWatcher() *maintenance.Loop {
	started := false
	return maintenance.Periodic("pause watcher", maintenance.Every(pauseInterval), nil, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		sent := time.Now()
		set, err := e.st.ReadPauses(ctx, e.pool)
		var tools []string
		if err == nil && !started {
			tools, err = e.startResumes(ctx, &set)
		}
		switch {
		case err == nil:
			started = true
			old := e.pauses.Swap(&set)
			if tools = append(tools, e.resumedTools(old, &set)...); len(tools) > 0 {
				e.deferrer.wake(tools)
			}
		case !isShutdown(ctx, err) && e.db.failed("pause watcher", sent, err):
			e.log.Warn("reading pauses failed; keeping the last known set", "err", err)
		}
	})
}

// startResumes lists the tools whose route or adapter an operator resumed
// within resumeLookBack and that set leaves unpaused. The rows a pause
// deferred (for about pausedRecheck) are woken by the engines that see
// the resume; one that starts after it (a replica restarted, a database
// handed over in a fleet, every replica down at the resume) reads the
// resumes from the audit instead, or those rows would wait out their
// deferral.
func (e *Engine) startResumes(ctx context.Context, set *pauseSet) ([]string, error) {
	routes := e.routing.Load().Routes
	var keys []string
	adapters := map[string]bool{}
	for _, r := range routes {
		keys = append(keys, "route:"+r.Tool)
		if !adapters[r.Adapter] {
			adapters[r.Adapter] = true
			keys = append(keys, "adapter:"+r.Adapter)
		}
	}
	resumed, err := e.st.RecentResumes(ctx, e.pool, keys, resumeLookBack)
	if err != nil || len(resumed) == 0 {
		return nil, err
	}
	hit := map[string]bool{}
	for _, k := range resumed {
		hit[k] = true
	}
	var tools []string
	for _, r := range routes {
		if (hit["route:"+r.Tool] || hit["adapter:"+r.Adapter]) && !paused(set, r, r.Adapter) {
			tools = append(tools, r.Tool)
		}
	}
	return tools, nil
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
