//go:build unix

package execplugin

import (
	"errors"
	"os/exec"
	"syscall"
)

// isolate puts the plugin in a process group of its own: a terminal's
// Ctrl-C does not reach it (drainer stops it), and kill reaches the helpers
// it started, which would otherwise keep its output pipes, and go-plugin's
// Kill, waiting. Where the system allows it (dieWithParent), the plugin is
// also killed when the daemon dies without stopping it (SIGKILL, a crash):
// out of the daemon's group, nothing else would reach it, and the restarted
// daemon would start a second instance beside it.
func isolate(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd.SysProcAttr)
}

// kill kills the plugin's process group.
func kill(cmd *exec.Cmd) error {
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil // already gone
	}
	return err
}
