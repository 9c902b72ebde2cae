package main

import (
	"os"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}
