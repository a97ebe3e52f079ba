package gage

import (
	"time"
)

// pacer keeps a gateway's dispatches within the capacity it was given, per
// resource: a budget refilled at the capacity rate, charged each
// dispatch's predicted usage and corrected by the usage reported. All
// three schedulers pace with it, so comparing them compares only how they
// share what the pacer lets through.
//
// The capacity is a vector (resources per second), because nodes have
// different amounts of each: a core gives 100 GRU/s of CPU, a 100 Mbit/s
// link 6,250 GRU/s of network. Pacing each resource separately lets
// CPU-bound and network-bound requests fill the cluster together (§3.4:
// "sums up available resources at the RPNs"; §3.5: a balance per
// resource).
//
// The budget refills continuously, up to Burst's worth: the paper divides
// the capacity "evenly among the scheduling cycles" (§3.4), and dividing
// it finer spreads dispatches over the cycle instead of sending a cycle's
// worth at its start. The cap is Burst rather than one cycle because with
// several resources binding at once, a budget held back on one resource
// (noisy corrections) would otherwise lose what the other accrued
// meanwhile.
type pacer struct {
	unit     Unit
	burst    time.Duration
	debt     time.Duration
	capacity Vector // per second
	budget   Vector
	refilled time.Time
	started  bool
}

func (p *pacer) advance(now time.Time) {
	if !p.started {
		p.started, p.refilled = true, now
		return
	}
	if d := now.Sub(p.refilled); d > 0 {
		p.budget = refill(p.budget, p.capacity.Scale(d.Seconds()), p.capacity.Scale(p.burst.Seconds()))
		p.refilled = now
	}
}

// open reports whether a dispatch may go now.
func (p *pacer) open() bool { return p.unit.positive(p.budget) }

// within reports whether the budget is above -d's worth of capacity in
// every scheduled resource.
func (p *pacer) within(d time.Duration) bool {
	for r, x := range p.unit {
		if x > 0 && p.budget[r] <= -p.capacity[r]*d.Seconds() {
			return false
		}
	}
	return true
}

func (p *pacer) charge(v Vector) { p.budget = p.budget.Sub(v) }

// correct adds a refund (positive) or an overrun (negative). A refund may
// lift the budget above what refilling stops at: capping it there would
// drop the refunds that arrive while the budget is full, and with skewed
// request sizes (most requests below the mean, a few far above) they are
// many and the capacity would go unused.
func (p *pacer) correct(v Vector) {
	p.budget = clamp(p.budget.Add(v), p.capacity.Scale(-p.debt.Seconds()), p.capacity.Scale(p.burst.Seconds()))
}

// set changes the capacity; a first one applies at once with a full
// budget.
func (p *pacer) set(c Vector) {
	c = c.Max(Vector{})
	if p.capacity.IsZero() && p.budget.IsZero() {
		p.budget = c.Scale(p.burst.Seconds())
	}
	p.capacity = c
}

// opensAt is when the budget is positive again; ok is false if it never
// will (no capacity).
func (p *pacer) opensAt(now time.Time) (time.Time, bool) {
	wait := 0.0
	for r, x := range p.unit {
		if x <= 0 || p.budget[r] > 0 {
			continue
		}
		if p.capacity[r] <= 0 {
			return time.Time{}, false
		}
		wait = max(wait, -p.budget[r]/p.capacity[r])
	}
	return now.Add(time.Duration(wait*1e9) + 1), true
}

// refill adds credit to v up to limit, componentwise; it never takes away
// what v holds above limit (refunds, see correct).
func refill(v, credit, limit Vector) Vector {
	for i := range v {
		v[i] = max(v[i], min(v[i]+credit[i], limit[i]))
	}
	return v
}

// GRPS is capacity c (resources per second) in generic requests per second:
// how many generic requests it serves, set by its scarcest resource.
func (u Unit) GRPS(c Vector) float64 {
	g, seen := 0.0, false
	for r, x := range u {
		if x > 0 {
			if !seen || c[r]/x < g {
				g = c[r] / x
			}
			seen = true
		}
	}
	return g
}
