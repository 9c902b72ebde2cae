// Package builtin is the one place that turns configured adapters into
// dispatch adapters: run, demo, bench and the integration tests all wire
// adapters through Build, so they behave the same.
//
// # Files
//
//	builtin.go     Options, DefaultKeyTTL, Build: each adapter by name, errors at its
//	               config line, key_ttl filled in; the http adapter (package webhook)
//	stripe.go      the stripe adapter
//	pgtable.go     the postgres adapter: connects and checks its table at startup
//	riverjob.go    the river adapter: connects and checks River's migrations
//	natsjs.go      the nats adapter: connects and checks the expected stream
//	execplugin.go  the plugin adapter: starts the executable; one reporting no
//	               key_ttl gets the type's default
//	mcp.go         the mcp adapter: its routes checked against the server's
//	               tools/list
//	kafka.go       the kafka adapter: asks the brokers for metadata; brokers
//	               not reachable yet are tried again in the background
package builtin
