package node

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/service"
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

// threadUsage runs f locked to its OS thread, as threadCPU does, and
// returns what that thread used: its CPU time, and its storage I/O in
// bytes. The I/O is the thread's read_bytes and write_bytes (the counts
// /proc/thread-self/io shows), read with getrusage(RUSAGE_THREAD), whose
// ru_inblock and ru_oublock are those counts in 512-byte blocks: one
// system call where reading the proc file takes an open, a read and a
// close, about 30 times the CPU, twice for every measured request. Zero
// where the kernel keeps no per-task I/O accounting.
func threadUsage(clk clock.Clock, f func()) service.Usage {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r0, w0, okIO := threadIO()
	cpu := threadCPU(clk, f)
	u := service.Usage{CPU: cpu}
	if r1, w1, ok := threadIO(); ok && okIO {
		u.DiskRead, u.DiskWrite = max(r1-r0, 0), max(w1-w0, 0)
	}
	return u
}

// threadIO is the calling thread's read_bytes and write_bytes.
func threadIO() (read, write int64, ok bool) {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) != nil {
		return 0, 0, false
	}
	return ru.Inblock * 512, ru.Oublock * 512, true
}

// processCPU is the CPU time of this process and its waited-for children.
func processCPU() time.Duration {
	var self, kids unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &self) != nil || unix.Getrusage(unix.RUSAGE_CHILDREN, &kids) != nil {
		return 0
	}
	tv := func(t unix.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// diskTicks is the largest io_ticks (milliseconds a device had I/O in
// flight) over the block devices of /proc/diskstats, per device name.
func diskTicks() map[string]int64 {
	f, err := os.Open("/proc/diskstats")
	if err != nil {
		return nil
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := bytes.Fields(sc.Bytes())
		if len(fs) < 13 {
			continue
		}
		if t, err := strconv.ParseInt(string(fs[12]), 10, 64); err == nil {
			out[string(fs[2])] = t
		}
	}
	return out
}
