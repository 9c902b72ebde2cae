//go:build !unix

package execplugin

import (
	"errors"
	"os"
	"os/exec"
)

func isolate(*exec.Cmd) {}

func kill(cmd *exec.Cmd) error {
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}
