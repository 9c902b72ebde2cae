package console

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
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
