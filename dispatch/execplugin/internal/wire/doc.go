// Package wire holds what the drainer host (package execplugin) and the
// plugin SDK must agree on: the go-plugin handshake, the name the adapter
// service is dispensed under, and the go-plugin glue around the generated
// gRPC code.
//
// # Files
//
//	wire.go  Handshake and its constants, PluginName, GRPCPlugin (both sides),
//	         Client (the host's view of one plugin process)
package wire
