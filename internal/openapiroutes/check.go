package openapiroutes

import (
	"errors"
	"strings"

	"github.com/drainer-io/drainer/config"
)

// checkAsConfig reads the routes the import would print as `drainer check`
// reads them, beside an http adapter, and returns what check would refuse,
// each at the operation of its route: a route the import writes is one
// check accepts (a DELETE with its key in the body, the path of a
// compensation no compensation's payload can fill), never one found only
// once pasted. Warnings stay check's to give.
func checkAsConfig(file string, res *Result) []error {
	const adapter = "imported"
	var b strings.Builder
	b.WriteString("adapters:\n  " + adapter + ": {type: http, url: \"https://api.invalid\"}\n")
	if err := WriteYAML(&b, file, adapter, res); err != nil {
		return []error{err}
	}
	_, err := config.Parse(file+" (as routes)", []byte(b.String()), config.LoadOptions{Check: true})
	var errs config.Errors
	if err == nil || !errors.As(err, &errs) {
		return nil
	}
	pointers := map[string]string{}
	for _, r := range res.Routes {
		pointers["routes."+r.Tool] = r.Pointer
	}
	var out []error
	for _, e := range errs {
		ptr := "#"
		for prefix, p := range pointers {
			if e.Field == prefix || strings.HasPrefix(e.Field, prefix+".") {
				ptr = p
			}
		}
		out = append(out, &Problem{File: file, Pointer: ptr, Msg: "the route it becomes: " + e.Field + ": " + e.Msg})
	}
	return out
}
