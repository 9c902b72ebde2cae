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
// Kill, waiting.
func isolate(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// kill kills the plugin's process group.
func kill(cmd *exec.Cmd) error {
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil // already gone
	}
	return err
}
