// Package storetest builds outbox rows for tests, as River's testfactory
// does for jobs: a fresh migrated database per test, intents enqueued the
// way agents enqueue them, and rows in any status (leased, parked, floored,
// compensations) inserted whole, without a raw UPDATE in the test.
//
// # Files
//
//	storetest.go  NewPool, Enqueue, Row and Insert, State and Get, CountByStatus
package storetest
