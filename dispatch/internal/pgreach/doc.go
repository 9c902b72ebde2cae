// Package pgreach tells, for the adapters that write into a PostgreSQL
// database (dispatch/pgtable, dispatch/riverjob), an error of their first
// contact with the server that says the server could not be reached from
// one that says it answered and refused: the first is waited out, the
// second is a configuration problem that fails the start.
package pgreach
