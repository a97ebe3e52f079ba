//go:build !linux

package node

import (
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/service"
)

// threadCPU falls back to wall time where Go offers no per-thread CPU
// clock we rely on.
func threadCPU(clk clock.Clock, f func()) time.Duration {
	start := clk.Now()
	f()
	return clk.Since(start)
}

// threadUsage is wall time and no disk where there is no per-thread
// accounting.
func threadUsage(clk clock.Clock, f func()) service.Usage {
	return service.Usage{CPU: threadCPU(clk, f)}
}

func processCPU() time.Duration { return 0 }

func diskTicks() map[string]int64 { return nil }
