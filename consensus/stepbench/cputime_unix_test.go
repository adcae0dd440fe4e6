//go:build unix

package stepbench

import "syscall"

// processCPU returns the user+system CPU time of the process in
// nanoseconds (it includes the garbage collector's work on other cores).
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
