#!/bin/sh
# Regenerates adapter.pb.go and adapter_grpc.pb.go from adapter.proto; run by
# `go generate ./dispatch/execplugin/proto`. The generated files are
# committed, so building and testing drainer never needs these tools.
#
# Tools (versions matching google.golang.org/protobuf and grpc in go.mod):
#   apt-get install -y protobuf-compiler        # protoc (3.21.12 on Debian 12)
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
set -eu
cd "$(dirname "$0")"
PATH="$(go env GOPATH)/bin:$PATH"
protoc --proto_path=. \
	--go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative \
	adapter.proto
