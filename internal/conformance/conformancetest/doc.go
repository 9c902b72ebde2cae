// Package conformancetest provides in-memory endpoints for testing `drainer
// conformance` and what uses it: one that honours the replay contract of
// docs/reference.md §11 and deliberately broken ones (a Flaw each: no replay
// marker, a changed body on replay, no payload check, nothing cached, the
// handler run twice under concurrency, ...).
//
// # Files
//
//	conformancetest.go  Endpoint, New, the flaws
package conformancetest
