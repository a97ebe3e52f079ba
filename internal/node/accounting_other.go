//go:build !linux

package node

import (
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
)

// threadCPU falls back to wall time where Go offers no per-thread CPU
// clock we rely on.
func threadCPU(clk clock.Clock, f func()) time.Duration {
	start := clk.Now()
	f()
	return clk.Since(start)
}
