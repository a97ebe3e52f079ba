package clock

import (
	"time"
)

// Dilated returns a clock on which time passes factor times slower than
// on base: Now advances 1/factor as fast from origin, and every timer set
// on it fires factor times later on base. A simulation that runs more
// members in one process than its CPUs could serve in real time runs them
// all on one dilated clock (time dilation, as in DieCast, NSDI 2008): each
// member then gets factor times the CPU per unit of its own time, and
// what the simulation measures in dilated time is what a machine factor
// times faster would in real time. The times that timers' channels carry
// are base's. Membership finds the factor (Dilation) and stretches
// memberlist's own timers by it too.
func Dilated(base Clock, origin time.Time, factor float64) Clock {
	return &dilated{base: base, origin: origin, factor: factor}
}

// Dilation is how many times slower than real time c runs: the factor of
// a Dilated clock, else 1.
func Dilation(c Clock) float64 {
	if d, ok := c.(*dilated); ok {
		return d.factor
	}
	return 1
}

type dilated struct {
	base   Clock
	origin time.Time
	factor float64
}

// stretch is how long d of dilated time lasts on base.
func (c *dilated) stretch(d time.Duration) time.Duration {
	return time.Duration(float64(d) * c.factor)
}

func (c *dilated) Now() time.Time {
	return c.origin.Add(time.Duration(float64(c.base.Now().Sub(c.origin)) / c.factor))
}
func (c *dilated) Since(t time.Time) time.Duration        { return c.Now().Sub(t) }
func (c *dilated) Until(t time.Time) time.Duration        { return t.Sub(c.Now()) }
func (c *dilated) Sleep(d time.Duration)                  { c.base.Sleep(c.stretch(d)) }
func (c *dilated) After(d time.Duration) <-chan time.Time { return c.base.After(c.stretch(d)) }
func (c *dilated) NewTimer(d time.Duration) Timer {
	return dilatedTimer{c.base.NewTimer(c.stretch(d)), c}
}
func (c *dilated) AfterFunc(d time.Duration, f func()) Timer {
	return dilatedTimer{c.base.AfterFunc(c.stretch(d), f), c}
}
func (c *dilated) NewTicker(d time.Duration) Ticker {
	return dilatedTicker{c.base.NewTicker(c.stretch(d)), c}
}

type dilatedTimer struct {
	Timer
	c *dilated
}

func (t dilatedTimer) Reset(d time.Duration) bool { return t.Timer.Reset(t.c.stretch(d)) }

type dilatedTicker struct {
	Ticker
	c *dilated
}

func (t dilatedTicker) Reset(d time.Duration) { t.Ticker.Reset(t.c.stretch(d)) }
