package execplugin

import "syscall"

// dieWithParent has the kernel send the plugin SIGKILL when the daemon's
// thread that started it exits: the daemon's death (Go exits threads only
// with the process, or with a goroutine locked to one, which the plugin's
// start is not).
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
