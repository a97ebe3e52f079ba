package gage

import (
	"math"
	"time"
)

// Meter is an exponentially decaying rate: the demand a gateway observes
// per subscriber, in GRU (or requests) per second. Each amount counts
// 1/Tau at once and decays with time constant Tau, so the estimate of a
// steady rate is that rate, and a change shows within a few Tau.
type Meter struct {
	Tau time.Duration // default 1 s

	rate    float64
	last    time.Time
	started bool
}

func (m *Meter) tau() float64 {
	if m.Tau <= 0 {
		return 1
	}
	return m.Tau.Seconds()
}

func (m *Meter) decay(now time.Time) {
	if !m.started {
		m.started, m.last = true, now
		return
	}
	if d := now.Sub(m.last); d > 0 {
		m.rate *= math.Exp(-d.Seconds() / m.tau())
		m.last = now
	}
}

// Add counts amount at now.
func (m *Meter) Add(now time.Time, amount float64) {
	m.decay(now)
	m.rate += amount / m.tau()
}

// Rate is the rate at now.
func (m *Meter) Rate(now time.Time) float64 {
	m.decay(now)
	return m.rate
}
