package work

import (
	"time"

	"golang.org/x/sys/unix"
)

// cpuClock returns a reader of the calling thread's CPU time, or of wall
// time if that cannot be read.
func cpuClock() func() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return wallClock()
	}
	return func() time.Duration {
		_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
		return time.Duration(ts.Nano())
	}
}
