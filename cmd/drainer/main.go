package main

import (
	"os"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	// First, before any slow startup: a SIGTERM that arrives while the
	// process starts must stop it cleanly, not kill it (see shutdownSignals).
	shutdown = catchShutdownSignals()
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}
