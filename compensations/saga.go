package compensations

import (
	"sort"

	"github.com/drainer-io/drainer/store"
)

// Map says which tool compensates which: Comps[i] undoes Tools[i].
type Map = store.Compensators

// NewMap builds a Map from tool → compensation tool.
func NewMap(comp map[string]string) Map {
	tools := make([]string, 0, len(comp))
	for t, c := range comp {
		if c != "" {
			tools = append(tools, t)
		}
	}
	sort.Strings(tools)
	m := Map{Tools: tools, Comps: make([]string, len(tools))}
	for i, t := range tools {
		m.Comps[i] = comp[t]
	}
	return m
}
