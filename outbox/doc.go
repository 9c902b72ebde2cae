// Package outbox holds the leaf types of drainer's outbox that the producer
// API, the engine, the saga runner and the operator commands share: row
// statuses and kinds, saga states, and the fixed label values of the
// metrics (docs/reference.md §2, §6, §7), and the check of what a payload's
// jsonb cannot store. It imports nothing of drainer's, so a Go agent that
// enqueues intents does not pull in the engine's dependencies.
//
// # Files
//
//	vocabulary.go  every word of the vocabularies and its SQL form: statuses (Terminal, Parked), kinds,
//	               classes, ordering modes, saga states, the alert row, metric label values, refusal reasons
//	jsonb.go       JSONBRefused: the escapes of valid JSON a jsonb column refuses (\u0000, a lone surrogate)
package outbox
