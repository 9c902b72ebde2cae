//go:build unix && !linux

package execplugin

import "syscall"

// dieWithParent: no parent-death signal here; a plugin outlives a daemon
// killed without stopping it.
func dieWithParent(*syscall.SysProcAttr) {}
