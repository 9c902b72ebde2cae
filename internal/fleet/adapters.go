package fleet

import (
	"sync"
	"sync/atomic"

	"github.com/drainer-io/drainer/drainer"
)

// generation is one set of adapters shared by every engine of the fleet:
// the routing they were built for, and what closes them. refs counts the
// engines' routings over it not yet released, plus one while it is the
// fleet's current generation, so it is closed exactly once, after a reload
// replaced it and the last claim or attempt on it ended.
type generation struct {
	routing func() *drainer.Routing
	close   func()
	refs    atomic.Int64
}

func newGeneration(routing func() *drainer.Routing, closeFn func()) *generation {
	g := &generation{routing: routing, close: closeFn}
	g.refs.Store(1) // the fleet's, while current
	return g
}

// release drops one reference; the last closes the adapters.
func (g *generation) release() {
	if g.refs.Add(-1) == 0 && g.close != nil {
		g.close()
	}
}

// newRouting returns a routing over the current generation for one engine,
// counted until the engine is done with it (Routing.Release). Under f.gmu.
func (f *Fleet) newRoutingLocked() (*drainer.Routing, *generation) {
	g := f.gen
	g.refs.Add(1)
	rt := g.routing()
	rt.Release = sync.OnceFunc(g.release)
	return rt, g
}

// Reload makes routing (over adapters closed by closeFn, nil for nothing
// to close) the fleet's: every running engine swaps it in at once (rows
// it leased before finish on the old one), every engine started later
// starts on it. The adapters replaced are closed once no engine uses
// them. After Run has returned, the new adapters are closed at once.
func (f *Fleet) Reload(routing func() *drainer.Routing, closeFn func()) {
	f.gmu.Lock()
	if f.gen == nil {
		f.gmu.Unlock()
		if closeFn != nil {
			closeFn()
		}
		return
	}
	old := f.gen
	f.gen = newGeneration(routing, closeFn)
	for eng := range f.engines {
		rt, _ := f.newRoutingLocked()
		eng.Reload(rt)
	}
	n := len(f.engines)
	f.gmu.Unlock()
	f.log.Info("fleet adapters reloaded", "engines", n)
	old.release()
}

// attach lets Reload reach eng, which started on generation g: when a
// reload came in the meantime, eng swaps in the current one at once.
func (f *Fleet) attach(eng *drainer.Engine, g *generation) {
	f.gmu.Lock()
	defer f.gmu.Unlock()
	if f.gen != nil && f.gen != g {
		rt, _ := f.newRoutingLocked()
		eng.Reload(rt)
	}
	f.engines[eng] = struct{}{}
}

// detach hides eng from Reload before it is stopped.
func (f *Fleet) detach(eng *drainer.Engine) {
	f.gmu.Lock()
	delete(f.engines, eng)
	f.gmu.Unlock()
}

// retireAdapters drops the fleet's reference to its current generation
// once Run is over: its adapters close when the last engine is done.
func (f *Fleet) retireAdapters() {
	f.gmu.Lock()
	g := f.gen
	f.gen = nil
	f.gmu.Unlock()
	if g != nil {
		g.release()
	}
}
