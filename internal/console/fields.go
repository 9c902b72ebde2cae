package console

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/drainer-io/drainer/internal/suggest"
	"github.com/drainer-io/drainer/ops"
)

// actionFields are the fields each action takes (besides actionCommon): a
// field of another name is refused, never ignored, so that a misspelled
// filter cannot widen a bulk action's view.
var actionFields = map[string][]string{
	verbRequeue: append([]string{"key", "dry_run", "confirm", "ignore_retry_after"}, viewParams...),
	verbCancel:  append([]string{"key", "dry_run", "confirm"}, viewParams...),
	verbResolve: {"key", "note", "outcome"},
	verbPause:   {"target", "name"},
	verbResume:  {"target", "name"},
}

// actionCommon are the fields every action takes: its CSRF token, the
// page to go back to, the database, the reason recorded and the actor.
var actionCommon = []string{"csrf", "back", "database", "reason", "actor"}

// checkFields refuses a field verb does not take, naming it and those it
// does.
func checkFields(verb string, v url.Values) error {
	allowed, ok := actionFields[verb]
	if !ok {
		return nil // act answers 404
	}
	var unknown []string
	for k := range v {
		if !slices.Contains(allowed, k) && !slices.Contains(actionCommon, k) {
			unknown = append(unknown, strconv.Quote(k))
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	return badRequest("%s takes no field %s: its fields are %s, and %s", verb, strings.Join(unknown, ", "),
		strings.Join(allowed, ", "), strings.Join(actionCommon, ", "))
}

// flag reads the boolean field name: absent or empty is false; anything
// but true/false, 1/0 and on/off is refused rather than read as false.
func flag(v url.Values, name string) (bool, error) {
	switch x := v.Get(name); x {
	case "", "false", "0", "off":
		return false, nil
	case "true", "1", "on":
		return true, nil
	default:
		return false, badRequest("%s: %q is not true or false", name, x)
	}
}

// knownName refuses to pause a route or adapter (target) the config in
// force does not name: such a pause would hold nothing back. It names the
// closest known name, or the other target when name is one.
func (s *Server) knownName(target, name string) error {
	if s.cfg.Names == nil {
		return nil
	}
	routes, adapters := s.cfg.Names()
	if routes == nil && adapters == nil {
		return nil // not known yet
	}
	known, other, otherTarget := routes, adapters, ops.TargetAdapter
	if target == ops.TargetAdapter {
		known, other, otherTarget = adapters, routes, ops.TargetRoute
	}
	if slices.Contains(known, name) {
		return nil
	}
	msg := fmt.Sprintf("pause: the loaded config names no %s %q", target, name)
	switch c := suggest.Closest(name, known); {
	case slices.Contains(other, name):
		msg += fmt.Sprintf(": it names the %s %q (target %q)", otherTarget, name, otherTarget)
	case c != "":
		msg += fmt.Sprintf(" (did you mean %q?)", c)
	}
	if len(known) > 0 {
		msg += fmt.Sprintf("; its %ss: %s", target, listNames(known))
	}
	return badRequest("%s", msg)
}
