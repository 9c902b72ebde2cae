// Package pluginpb holds the gRPC protocol between drainer and adapter
// plugins (adapter.proto) and its generated Go code. Plugin authors writing
// Go use the sdk package instead; authors in other languages generate their
// stubs from adapter.proto, whose header documents the handshake.
package pluginpb

//go:generate ./gen.sh
