package bench

import (
	"fmt"
	"io"
	"runtime"
	"runtime/pprof"
)

// startProfiles starts the profiles asked for (DrainCPUProfile,
// DrainMemProfile) over one window; the function returned ends it.
func (r *runner) startProfiles() (func() error, error) {
	if w := r.opts.DrainMemProfileBase; w != nil {
		if err := writeAllocs(w); err != nil {
			return nil, fmt.Errorf("memory profile: %w", err)
		}
	}
	cpu := r.opts.DrainCPUProfile
	if cpu != nil {
		if err := pprof.StartCPUProfile(cpu); err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
	}
	return func() error {
		if cpu != nil {
			pprof.StopCPUProfile()
		}
		if w := r.opts.DrainMemProfile; w != nil {
			if err := writeAllocs(w); err != nil {
				return fmt.Errorf("memory profile: %w", err)
			}
		}
		return nil
	}, nil
}

// writeAllocs writes the allocation profile as it stands now (the
// runtime's stands as of the last garbage collection: one is run first).
func writeAllocs(w io.Writer) error {
	runtime.GC()
	return pprof.Lookup("allocs").WriteTo(w, 0)
}
