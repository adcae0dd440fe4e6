//go:build linux

package wannet

import (
	"errors"
	"runtime"

	"golang.org/x/sys/unix"
)

// The link's writers hold each packet until its due time on the
// monotonic clock with clock_nanosleep on an OS thread of their own, as
// the kernel's netem does with an hrtimer. A Go timer would not do: the
// runtime parks an idle process in epoll_wait, whose timeout is whole
// milliseconds, so a timer due in under 1 ms fires up to 1 ms late.
// Every packet that follows another by less than a millisecond (an ack,
// then the data behind it) then arrives up to 1 ms late, which inflates
// exactly the multi-packet exchanges a WAN benchmark measures.

// monoNow is CLOCK_MONOTONIC in nanoseconds.
func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail for this clock
	return ts.Nano()
}

// preciseThread locks the calling goroutine to its OS thread for good
// (the thread ends with the goroutine) and drops the thread's timer
// slack from the default 50 µs to 1 ns.
func preciseThread() {
	runtime.LockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0) // best effort: the default slack is 50 µs
}

// sleepUntil blocks the thread until the monotonic clock reads due (ns).
func sleepUntil(due int64) {
	ts := unix.NsecToTimespec(due)
	for {
		err := unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}
