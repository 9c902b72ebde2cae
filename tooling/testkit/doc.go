// Package testkit holds the helpers that tests of every package share.
//
// It imports only the standard library, so any test package may use it
// without pulling the project's runtime into its helpers.
//
// # Files
//
//	wait.go     WaitFor, polling a condition within a generous bound
//	headers.go  Headers, an http.RoundTripper setting headers on each request
//	later.go    Later, a provider unreachable at first that comes up on Open
//	silent.go   Silent, a server that accepts connections and never answers
package testkit
