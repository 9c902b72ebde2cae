// Package maintenance runs the engine's background work as services with a
// lifecycle of their own: each is started once, stopped once, and Stop
// returns only when its goroutine has exited. Stop before Start, or twice,
// is harmless.
//
// # Files
//
//	maintenance.go  Service; Loop (one goroutine); Periodic, Every (a tick per
//	                interval or wake); Group (start in order, stop in reverse)
package maintenance
