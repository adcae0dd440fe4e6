//go:build unix

package consensus

import "syscall"

// processCPU returns the user+system CPU time of the process in
// nanoseconds. Benchmarks report it per op: on a machine shared with other
// builds wall time mostly measures waiting for a core, CPU time does not.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
