//go:build !linux

package neptune

import "time"

// threadCPU falls back to wall time where Go offers no per-thread CPU
// clock we rely on.
func threadCPU(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}
