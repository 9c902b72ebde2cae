package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/drainer-io/drainer/store"
)

// What the console reads of every database at once (a fleet's overview
// of pauses, an action naming a key and no database): at most fanOut
// databases at a time, each within perDatabase, all within allDatabases.
const (
	fanOut       = 8
	perDatabase  = 5 * time.Second
	allDatabases = 15 * time.Second
	// pausesKept is how long every database's pauses, once read, answer
	// the whole fleet's overview (an action of this console reads them
	// again at once).
	pausesKept = 10 * time.Second
	// maxNamesShown bounds the databases an answer lists.
	maxNamesShown = 20
)

// Pause is a pause in force, with the database it holds in.
type Pause struct {
	Database string `json:"database"`
	store.Pause
}

// pausesOf reads d's pauses.
func pausesOf(ctx context.Context, d *db) ([]Pause, error) {
	ps, err := d.ops.Pauses(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Pause, len(ps))
	for i, p := range ps {
		out[i] = Pause{Database: d.Name, Pause: p}
	}
	return out, nil
}

// fleetPauses are every database's pauses as last read.
type fleetPauses struct {
	mu     sync.Mutex
	at     time.Time // zero: read them again
	list   []Pause
	unread []string
}

// forget makes the next overview read the pauses again (an action of this
// console paused or resumed).
func (p *fleetPauses) forget() {
	p.mu.Lock()
	p.at = time.Time{}
	p.mu.Unlock()
}

// allPauses returns the pauses of every database shown, each naming its
// database, and the databases whose pauses could not be read, each with
// why: the whole fleet's overview. They live in each database, so they are
// read through each database's console connection (opened on use, closed
// when idle), at most every pausesKept; a request meanwhile waits for the
// read under way rather than starting another.
func (s *Server) allPauses(ctx context.Context) ([]Pause, []string) {
	p := &s.pauses
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.at.IsZero() && time.Since(p.at) < pausesKept {
		return slices.Clone(p.list), slices.Clone(p.unread)
	}
	names := s.names()
	found := make([][]Pause, len(names))
	errs := s.eachDatabase(ctx, names, func(ctx context.Context, i int, d *db) error {
		var err error
		found[i], err = pausesOf(ctx, d)
		return err
	})
	list, unread := []Pause{}, []string{}
	for i, name := range names {
		if errs[i] != nil {
			unread = append(unread, name+": "+s.unreadWhy(name, errs[i]))
			continue
		}
		list = append(list, found[i]...)
	}
	if ctx.Err() == nil {
		p.at, p.list, p.unread = time.Now(), list, unread
	}
	return slices.Clone(list), slices.Clone(unread)
}

// unreadWhy says why database name could not be read, for an answer (the
// error itself, which may name its server, goes to the log).
func (s *Server) unreadWhy(name string, err error) string {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae.Msg
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("no answer within %s", perDatabase)
	}
	s.log.Warn("console: a database could not be read", "database", name, "err", err)
	return "could not be read (see the daemon's log)"
}

// eachDatabase runs fn on every database of names, at most fanOut at
// once, each within perDatabase and all within allDatabases; the i-th
// error is names[i]'s.
func (s *Server) eachDatabase(ctx context.Context, names []string, fn func(ctx context.Context, i int, d *db) error) []error {
	ctx, cancel := context.WithTimeout(ctx, allDatabases)
	defer cancel()
	errs := make([]error, len(names))
	slots := make(chan struct{}, fanOut)
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-slots }()
			d, err := s.databaseNamed(name)
			if err == nil {
				dctx, cancel := context.WithTimeout(ctx, perDatabase)
				err = fn(dctx, i, d)
				cancel()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	return errs
}

// engines lists the breakers and holds of every engine of this replica
// (a fleet's), each naming its database, in the order of names.
func (m *sampler) engines(names []string) []AdapterState {
	out := []AdapterState{}
	if m.s.cfg.EngineAdapters == nil {
		return out
	}
	by := m.s.cfg.EngineAdapters()
	for _, name := range names {
		out = append(out, adapterStates(by[name], name)...)
	}
	return out
}

// engineOf sets what one database's overview shows of its engine, with a
// fleet: its dispatch rates (its series only), and its breakers and holds
// when this replica drains it. When it does not, it shows none of
// another's: DrainedHere says so, DrainedBy names the replica that does.
func (m *sampler) engineOf(st *Stats, name string) {
	st.DispatchRates = m.ratesOf(name)
	if st.DispatchRates == nil {
		st.DispatchRates = map[string]float64{}
	}
	st.Adapters = []AdapterState{}
	if m.s.cfg.EngineAdapters != nil {
		states, drained := m.s.cfg.EngineAdapters()[name]
		st.DrainedHere = &drained
		if drained {
			st.Adapters = adapterStates(states, name)
		} else {
			st.DispatchRates = map[string]float64{}
			for _, b := range st.RowsByDatabase {
				if b.Name == name {
					st.DrainedBy = b.Member
				}
			}
		}
	}
	st.RequestsPerSecond = sent(st.DispatchRates)
}

// keyVerbs are the actions that may name a key without a database.
var keyVerbs = []string{verbRequeue, verbCancel, verbResolve}

// actionDatabase is the database an action acts on: the one it names,
// else the only one shown. With more than one and none named, an action
// on a key acts where the key is (keyDatabase); any other is refused,
// naming the databases, rather than acting on the first.
func (s *Server) actionDatabase(ctx context.Context, verb string, v url.Values) (*db, error) {
	name := v.Get("database")
	if _, known := actionFields[verb]; name != "" || !known || !s.scoped() {
		return s.databaseNamed(name)
	}
	names := s.names()
	if len(names) <= 1 {
		return s.databaseNamed("")
	}
	if key := v.Get("key"); key != "" && slices.Contains(keyVerbs, verb) {
		return s.keyDatabase(ctx, key)
	}
	return nil, badRequest("%s: name the database to act on (database): this console shows %d, %s", verb, len(names), listNames(names))
}

// keyDatabase finds the database holding key among all those shown: an
// action naming a key and no database acts there. A key in more than one
// is a 409 naming them; one in none a 404; and when a database could not
// be read, nothing is acted on (the key may be there too): a 503 naming it.
func (s *Server) keyDatabase(ctx context.Context, key string) (*db, error) {
	names, in, unread := s.keyHolders(ctx, key, false)
	switch {
	case len(in) > 1:
		return nil, inSeveral("key "+key, in, "act on")
	case len(unread) > 0:
		where := "in none of the others"
		if len(in) == 1 {
			where = "in " + in[0]
		}
		return nil, &apiError{Status: http.StatusServiceUnavailable,
			Msg: fmt.Sprintf("key %s: found %s, but %s could not be read, and may hold it too: name the database to act on (database)",
				key, where, listNames(unreadWhy(unread, " (%s)")))}
	case len(in) == 0:
		return nil, inNone("row with key "+key, names)
	}
	return s.databaseNamed(in[0])
}

// keyHolders looks for key in every database shown (names): in are those
// holding its row (or, with pruned, its tombstone), unread those that
// could not be read.
func (s *Server) keyHolders(ctx context.Context, key string, pruned bool) (names, in []string, unread []unreadDB) {
	names = s.names()
	holds := make([]bool, len(names))
	errs := s.eachDatabase(ctx, names, func(ctx context.Context, i int, d *db) error {
		status, err := d.Store.RowStatus(ctx, d.DB, key)
		holds[i] = status != ""
		if err == nil && !holds[i] && pruned {
			var ts *store.Tombstone
			ts, err = d.Store.ReadTombstone(ctx, d.DB, key)
			holds[i] = ts != nil
		}
		return err
	})
	for i, name := range names {
		switch {
		case errs[i] != nil:
			unread = append(unread, unreadDB{name, s.unreadWhy(name, errs[i])})
		case holds[i]:
			in = append(in, name)
		}
	}
	return names, in, unread
}

// inSeveral refuses to pick one of the databases in holding what (a key, a
// run): a 409 naming them (in its databases too), to name the one to verb.
func inSeveral(what string, in []string, verb string) error {
	return &apiError{Status: http.StatusConflict, Databases: in,
		Msg: fmt.Sprintf("%s is in %d databases, %s: name the one to %s (database)", what, len(in), listNames(in), verb)}
}

// inNone is a 404: every database of names was searched for what.
func inNone(what string, names []string) error {
	return &apiError{Status: http.StatusNotFound,
		Msg: fmt.Sprintf("no %s in any of the %d databases (%s)", what, len(names), listNames(names))}
}

// unreadDB is a database that could not be read, and why.
type unreadDB struct{ name, why string }

// unreadWhy lists us for an answer, each its name then its why in format
// (": %s" or " (%s)").
func unreadWhy(us []unreadDB, format string) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = u.name + fmt.Sprintf(format, u.why)
	}
	return out
}

// listNames lists names for an answer, the first maxNamesShown of them.
func listNames(names []string) string {
	if len(names) <= maxNamesShown {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:maxNamesShown], ", "), len(names)-maxNamesShown)
}
