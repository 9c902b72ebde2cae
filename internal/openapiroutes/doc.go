// Package openapiroutes turns the x-agent-idempotency extension of an
// OpenAPI 3 document into drainer routes (drainer routes import).
//
// # Files
//
//	openapiroutes.go  Extension, the classes, Route, Options, Result, Problem; Import:
//	                  syntax errors with their line, the document loaded, its
//	                  operations walked in path and method order, every problem at once
//	manifest.go       Manifest, Compensation: one operation's block read field by field
//	                  (unknown fields with a "did you mean", wrong types), checked by
//	                  class and agent_safe
//	request.go        the operation's method and path, its path parameters checked
//	                  and the body chosen from the request body schema (the payload,
//	                  or without the path fields); detection as a detect probe
//	yaml.go           WriteYAML: the routes: section to paste into a config
//	testdata/         documents of the tests, third-party ones trimmed (README.md
//	                  names their sources and licences)
package openapiroutes
