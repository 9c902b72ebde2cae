//go:build !linux

package bench

import (
	"errors"
	"os/exec"
)

// vmHWM needs Linux's /proc/PID/status.
func vmHWM(int) (int64, error) {
	return 0, errors.New("per-process peak RSS is read from /proc/PID/status, which only Linux has")
}

func dieWithParent(*exec.Cmd) {}
