// Package pgreach holds what the adapters that write into a PostgreSQL
// database (dispatch/pgtable, dispatch/riverjob) decide alike about the
// server's errors. Unreachable tells, at their first contact, a server
// that could not be reached (waited out) from one that answered and
// refused (a configuration problem that fails the start). Missing tells,
// after the start, that their table or its schema is gone: rows wait, no
// attempt consumed, until it is back.
package pgreach
