package sched

import (
	"math"
	"time"
)

// ClassStats is one class's counters and gauges, shaped for export as
// metrics: the counts and sums only grow, the rest are gauges.
type ClassStats struct {
	Name      string
	Guarantee float64
	// Share is the class's fraction of the decayed resource use of all
	// classes, including the estimates charged for requests in flight: the
	// number the guarantee rule compares with Guarantee.
	Share float64
	// WindowShare is the class's fraction of the resource use charged in
	// the last Config.GuaranteeWindow, the short-horizon guarantee measure.
	WindowShare float64
	// Usage is u_k(now) in resource-seconds.
	Usage            float64
	Queued, InFlight int
	// Arrivals counts pushes, Dispatched pops, Completions finishes,
	// Abandoned the dispatched requests whose caller gave up before they
	// ran, and Drops the requests Pop discarded as (near-)zero yield.
	Arrivals, Dispatched, Completions, Abandoned, Drops uint64
	// OfferedYield is the full yield of every arrival; RealizedYield what
	// the completed requests earned at their response times.
	OfferedYield, RealizedYield float64
	// QueueWait is the total time dispatched requests spent queued.
	QueueWait time.Duration
	// ExpectedService and ExpectedCost are the EWMAs the policies use.
	ExpectedService, ExpectedCost time.Duration
}

// LossPercent is the share of offered yield not realized (§4.5.2).
func (c ClassStats) LossPercent() float64 { return LossPercent(c.OfferedYield, c.RealizedYield) }

// MeanWait is the mean queueing time of dispatched requests.
func (c ClassStats) MeanWait() time.Duration {
	if c.Dispatched == 0 {
		return 0
	}
	return c.QueueWait / time.Duration(c.Dispatched)
}

// Stats is a snapshot of a ClassScheduler.
type Stats struct {
	// Mode is the policy the next decision uses: Adaptive resolved to YID
	// or Greedy.
	Mode Policy
	// RecentDropRatio is drops over arrivals within Config.OverloadWindow.
	RecentDropRatio float64
	Classes         []ClassStats
}

// LossPercent is LossPercent over all classes.
func (s Stats) LossPercent() float64 {
	var off, real float64
	for _, c := range s.Classes {
		off += c.OfferedYield
		real += c.RealizedYield
	}
	return LossPercent(off, real)
}

// LossPercent is the share of the offered yield not realized, in percent
// (§4.5.2), for sums over several classes or runs.
func LossPercent(offered, realized float64) float64 {
	if offered == 0 {
		return 0
	}
	return (offered - realized) / offered * 100
}

// Stats returns a snapshot at now.
func (s *ClassScheduler) Stats(now time.Time) Stats {
	t := now.UnixNano()
	s.drops.advance(t)
	s.expire(t)
	st := Stats{Mode: s.mode(), Classes: make([]ClassStats, len(s.classes))}
	if s.drops.sumArrivals > 0 {
		st.RecentDropRatio = float64(s.drops.sumDrops) / float64(s.drops.sumArrivals)
	}
	decay := math.Exp(-s.lambda * float64(t-s.epoch) / 1e9)
	for i := range s.classes {
		c := &s.classes[i]
		cs := c.stats
		cs.Name, cs.Guarantee = c.Name, c.Guarantee
		cs.Share = s.share(c)
		cs.WindowShare = s.windowShare(c)
		cs.Usage = c.usage * decay
		cs.Queued, cs.InFlight = c.q.n, c.inFlight
		cs.ExpectedService = time.Duration(c.svc * 1e9)
		cs.ExpectedCost = time.Duration(c.cost * 1e9)
		st.Classes[i] = cs
	}
	return st
}

// ClassLen is the number of queued requests of class (the default class's
// for an empty or unknown name).
func (s *ClassScheduler) ClassLen(class string) int {
	k, ok := s.index[class]
	if !ok {
		k = s.def
	}
	return s.classes[k].q.n
}
