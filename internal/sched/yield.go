package sched

import (
	"fmt"
	"math"
	"time"
)

// Yield is a service yield function (dissertation §4.2.1): what serving a
// request is worth as a function of its response time. Every shape in the
// dissertation is the hybrid form
//
//	Full                                         for r ≤ PreDeadline
//	Full − (Full − Penalty)·(r − D′)/(D − D′)    for PreDeadline < r ≤ Deadline
//	0                                            for r > Deadline
//
// so one struct covers them: Throughput is PreDeadline = Deadline, and
// ResponseTime is PreDeadline = 0 with Penalty = 0.
type Yield struct {
	// Full is the yield of a prompt response (C).
	Full float64
	// PreDeadline is how long a response keeps its full yield (D′).
	PreDeadline time.Duration
	// Penalty is the yield left at exactly Deadline (the drop penalty C′).
	Penalty float64
	// Deadline is when the response becomes worthless (D).
	Deadline time.Duration
}

// Throughput is worth c when answered within d and nothing after.
func Throughput(c float64, d time.Duration) Yield {
	return Yield{Full: c, PreDeadline: d, Penalty: c, Deadline: d}
}

// ResponseTime decays linearly from c at zero to nothing at d.
func ResponseTime(c float64, d time.Duration) Yield {
	return Yield{Full: c, Deadline: d}
}

// Hybrid is worth c up to dPre, then decays linearly to the drop penalty
// cDrop at d, and is worthless after d.
func Hybrid(c float64, dPre time.Duration, cDrop float64, d time.Duration) Yield {
	return Yield{Full: c, PreDeadline: dPre, Penalty: cDrop, Deadline: d}
}

// At returns the yield of a response after r.
func (y Yield) At(r time.Duration) float64 {
	return y.atSeconds(r.Seconds())
}

// atSeconds is At on float seconds, the unit the scheduler's hot path uses.
func (y Yield) atSeconds(r float64) float64 {
	d, dp := y.Deadline.Seconds(), y.PreDeadline.Seconds()
	switch {
	case r > d:
		return 0
	case r <= dp:
		return y.Full
	default:
		return y.Full - (y.Full-y.Penalty)*(r-dp)/(d-dp)
	}
}

// usefulFor is the longest response time whose yield exceeds min, for
// 0 ≤ min < Full: requests that cannot finish within it are dropped.
func (y Yield) usefulFor(min float64) time.Duration {
	if y.Penalty > min || y.PreDeadline == y.Deadline {
		return y.Deadline
	}
	// Solve Full − (Full−Penalty)·(r−D′)/(D−D′) = min for r; the yield at
	// that r is min itself, so step back 1 ns.
	frac := (y.Full - min) / (y.Full - y.Penalty)
	return y.PreDeadline + time.Duration(frac*float64(y.Deadline-y.PreDeadline)) - 1
}

// Validate reports why y is not a monotonically non-increasing, non-negative
// function of the response time. Messages name the field.
func (y Yield) Validate() error {
	switch {
	case !(y.Full > 0) || math.IsInf(y.Full, 0):
		return fmt.Errorf("Full is %v, want a finite value > 0", y.Full)
	case !(y.Penalty >= 0):
		return fmt.Errorf("Penalty is %v, want ≥ 0", y.Penalty)
	case y.Penalty > y.Full:
		return fmt.Errorf("Penalty %v exceeds Full %v, so yield would rise with response time", y.Penalty, y.Full)
	case y.Deadline <= 0:
		return fmt.Errorf("Deadline is %v, want > 0", y.Deadline)
	case y.PreDeadline < 0:
		return fmt.Errorf("PreDeadline is %v, want ≥ 0", y.PreDeadline)
	case y.PreDeadline > y.Deadline:
		return fmt.Errorf("PreDeadline %v exceeds Deadline %v", y.PreDeadline, y.Deadline)
	}
	return nil
}
