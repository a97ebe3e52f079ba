//go:build !linux

package work

import "time"

func cpuClock() func() time.Duration { return wallClock() }
