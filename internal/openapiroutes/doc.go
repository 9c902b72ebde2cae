// Package openapiroutes turns the x-agent-idempotency extension of an
// OpenAPI 3 document into drainer routes (drainer routes import).
//
// # Files
//
//	openapiroutes.go  Extension, the classes, Route, Result, Problem; Import: the
//	                  document loaded, its operations walked in path and method order
//	manifest.go       Manifest, Compensation: one operation's block, checked by class
//	yaml.go           WriteYAML: the routes: section to paste into a config
package openapiroutes
