//go:build !linux

package bench

import "runtime"

// peakRSS approximates the peak resident set size where ru_maxrss has
// another unit or does not exist: the memory the Go runtime obtained from
// the OS, which bounds the heap's resident part from above.
func peakRSS() (int64, error) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.Sys), nil
}
