package node

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neptune-cluster/neptune/internal/clock"
)

// threadCPU runs f with the goroutine locked to its OS thread and returns
// the CPU time that thread spent, which is f's own CPU use: no other
// goroutine runs on a locked thread. Work f hands to other goroutines, and
// CPU the runtime spends elsewhere on its behalf (GC), are not included.
func threadCPU(clk clock.Clock, f func()) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// Wall time stands in if the clock is unavailable (it is on Linux).
	start := clk.Now()
	var a, b unix.Timespec
	errA := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &a)
	f()
	if errA != nil || unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &b) != nil {
		return clk.Since(start)
	}
	return time.Duration(b.Nano() - a.Nano())
}
