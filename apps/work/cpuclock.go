package work

import "time"

// wallClock reads the time since its creation.
func wallClock() func() time.Duration {
	start := time.Now()
	return func() time.Duration { return time.Since(start) }
}
