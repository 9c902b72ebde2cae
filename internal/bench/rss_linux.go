//go:build linux

package bench

import "syscall"

// peakRSS returns the process's peak resident set size in bytes:
// getrusage(RUSAGE_SELF) ru_maxrss, which Linux reports in KiB.
func peakRSS() (int64, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return ru.Maxrss * 1024, nil
}
