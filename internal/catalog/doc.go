// Package catalog lists the databases one fleet drains (the databases:
// section of the config): the static entries, their urls read again on
// each call so that rotated credentials files are picked up, merged with
// the rows of the catalog query.
//
// The query runs over one connection kept open (at most one catalog
// connection per process), reopened after a failure; NewShared runs it over
// the caller's connection instead (a fleet replica's coordination
// connection, which is to the catalog database), so that the process holds
// one connection to the catalog database, not two. A bad row is skipped
// and reported with its position; a failed query leaves the last known list
// in force, returned together with the error, so callers keep draining
// what they know. Errors and logs name databases, never their urls.
//
// # Files
//
//	catalog.go  Database; Catalog (New, NewShared, List, Close); Connect,
//	            which opens a connection and keeps the url out of its errors
package catalog
