package gage

import (
	"fmt"
	"time"
)

// Credit is the paper's request scheduler (§3.4, with the per-resource
// balances of §3.5): per-subscriber FIFO queues served by a credit-based
// weighted round robin on a short cycle.
//
// Each cycle:
//
//  1. Every queue's balance is credited with its reservation for one cycle
//     (a vector: reservation × unit × cycle). The scheduler visits the
//     queues in turn and dispatches from each "as many requests as possible
//     until the balance becomes negative or ... the queue is empty",
//     charging each request its predicted usage. A balance may end
//     negative by at most one request; the debt is paid from the next
//     credits, so over time a subscriber gets its reservation exactly.
//  2. What is left of the cycle's capacity (the capacity divided evenly
//     among cycles, §3.4, minus the predicted usage of what was just
//     dispatched) is the spare. It is shared among the queues still
//     non-empty in proportion to their reservations, not their demand
//     (§4.2.2), and a second round dispatches against that spare credit.
//     If queues empty before using their part, the rest is shared again
//     among the queues still waiting, so no capacity idles while requests
//     wait (the paper stops after one round; this is its work-conserving
//     completion).
//
// Requests are charged at dispatch with the subscriber's predicted usage
// (the EWMA M_k of §3.4). When nodes report the actual usage, the
// prediction is refunded and the actual charged instead (§3.5: "subtracts
// each per-subscriber resource usage from the corresponding subscriber's
// balance"), to the subscriber's balance, its limit and the capacity, so a
// subscriber whose requests cost more than predicted is held back by the
// difference and the guarantee holds in resources, not in request counts.
//
// A limit is a second balance credited at the limit rate; a queue whose
// limit balance is spent waits whatever its other credit. Zero-reservation
// subscribers (the default one) are served from spare only and share it
// with a weight of 1 GRPS, so they are not starved on an idle cluster.
type Credit struct {
	opt      Options
	unit     Unit
	queues   []*creditQueue
	byName   map[string]int
	capacity float64 // GRPS

	started    bool
	cycleStart time.Time
	budget     Vector // capacity left in the current cycle
	spareGiven bool   // whether this cycle's spare was shared yet
	rr1, rr2   int    // round-robin positions of the two rounds
}

type creditQueue struct {
	sub   Subscriber
	share float64
	q     ring
	bal   Vector // reservation credit
	extra Vector // spare credit of the current cycle
	lim   Vector // limit credit
	pred  predictor
	out   inflight
}

// minWeight is the spare-sharing weight, in GRPS, of a subscriber without
// reservation.
const minWeight = 1.0

var _ Scheduler = (*Credit)(nil)

// NewCredit returns the credit scheduler for cfg's subscribers (the default
// one included).
func NewCredit(cfg Config, opt Options) (*Credit, error) {
	u, opt, err := prepare("credit", cfg, opt)
	if err != nil {
		return nil, err
	}
	c := &Credit{opt: opt, unit: u, byName: map[string]int{}}
	for _, s := range cfg.All() {
		c.byName[s.Name] = len(c.queues)
		c.queues = append(c.queues, &creditQueue{
			sub: s, share: 1,
			pred: predictor{alpha: opt.Alpha, period: opt.AccountingCycle, m: opt.Initial},
		})
	}
	return c, nil
}

func (q *creditQueue) reservation() float64 { return q.sub.Reservation * q.share }
func (q *creditQueue) limit() float64       { return q.sub.Limit * q.share }
func (q *creditQueue) weight() float64      { return max(q.reservation(), minWeight) }

// rate turns a rate in GRPS and a duration into a resource vector.
func (c *Credit) rate(grps float64, d time.Duration) Vector {
	return c.unit.Times(grps * seconds(d))
}

// advance moves the clock to now, starting as many cycles as have begun.
func (c *Credit) advance(now time.Time) {
	if !c.started {
		c.started, c.cycleStart = true, now
		c.newCycles(1)
		return
	}
	if d := now.Sub(c.cycleStart); d >= c.opt.Cycle {
		k := int64(d / c.opt.Cycle)
		c.cycleStart = c.cycleStart.Add(time.Duration(k) * c.opt.Cycle)
		c.newCycles(k)
	}
}

// newCycles credits k cycles at once (k > 1 after an idle spell, when the
// shell slept through cycles). Only enough cycles to reach every cap
// matter, so k is bounded.
func (c *Credit) newCycles(k int64) {
	k = min(k, int64((c.opt.Burst+c.opt.Debt)/c.opt.Cycle)+2)
	n := float64(k)
	for _, q := range c.queues {
		r := q.reservation()
		q.bal = clamp(q.bal.Add(c.rate(r, c.opt.Cycle).Scale(n)), c.rate(r, c.opt.Debt).Scale(-1), c.rate(r, c.opt.Burst))
		if l := q.limit(); l > 0 {
			q.lim = clamp(q.lim.Add(c.rate(l, c.opt.Cycle).Scale(n)), c.rate(l, c.opt.Debt).Scale(-1), c.rate(l, c.opt.Burst))
		}
		// Spare does not carry over: what was not used is gone, and an
		// overshoot by the last request is a debt on the next spare.
		q.extra = clamp(q.extra, c.rate(q.weight(), c.opt.Burst).Scale(-1), Vector{})
	}
	cyc := c.rate(c.capacity, c.opt.Cycle)
	c.budget = clamp(c.budget.Add(cyc.Scale(n)), c.rate(c.capacity, c.opt.Debt).Scale(-1), cyc)
	c.spareGiven = false
}

// Enqueue implements Scheduler.
func (c *Credit) Enqueue(now time.Time, r Request) error {
	c.advance(now)
	i, ok := c.byName[r.Subscriber]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownSubscriber, r.Subscriber)
	}
	q := c.queues[i]
	if q.q.len() >= c.opt.MaxQueue {
		return ErrQueueFull
	}
	q.q.push(r)
	return nil
}

// Next implements Scheduler.
func (c *Credit) Next(now time.Time) (Request, bool) {
	c.advance(now)
	if !c.unit.positive(c.budget) {
		return Request{}, false
	}
	// Round 1: reservations.
	if i, ok := c.pick(&c.rr1, func(q *creditQueue) Vector { return q.bal }); ok {
		return c.dispatch(i, &c.queues[i].bal), true
	}
	// Round 2: the spare, in proportion to reservations; shared again if
	// it was given to queues that have emptied since.
	extra := func(q *creditQueue) Vector { return q.extra }
	for attempt := 0; attempt < 2; attempt++ {
		if attempt > 0 || !c.spareGiven {
			if !c.shareSpare() {
				break
			}
			c.spareGiven = true
		}
		if i, ok := c.pick(&c.rr2, extra); ok {
			return c.dispatch(i, &c.queues[i].extra), true
		}
	}
	return Request{}, false
}

// eligible reports whether q has a request and room under its limit.
func (c *Credit) eligible(q *creditQueue) bool {
	return q.q.len() > 0 && (q.sub.Limit == 0 || c.unit.positive(q.lim))
}

// pick finds, from *rr on, the first eligible queue whose credit is
// positive, and leaves *rr on it: the round robin stays on a queue until
// its credit or its requests run out (§3.4).
func (c *Credit) pick(rr *int, credit func(*creditQueue) Vector) (int, bool) {
	n := len(c.queues)
	for k := range n {
		i := (*rr + k) % n
		q := c.queues[i]
		if c.eligible(q) && c.unit.positive(credit(q)) {
			*rr = i
			return i, true
		}
	}
	*rr = (*rr + 1) % n
	return 0, false
}

// shareSpare credits the budget left in this cycle to the eligible queues
// in proportion to their weights; false if no queue can take it.
func (c *Credit) shareSpare() bool {
	total := 0.0
	for _, q := range c.queues {
		if c.eligible(q) {
			total += q.weight()
		}
	}
	if total == 0 {
		return false
	}
	for _, q := range c.queues {
		if c.eligible(q) {
			q.extra = q.extra.Add(c.budget.Scale(q.weight() / total))
		}
	}
	return true
}

func (c *Credit) dispatch(i int, credit *Vector) Request {
	q := c.queues[i]
	r := q.q.pop()
	p := q.pred.predict()
	*credit = credit.Sub(p)
	if q.sub.Limit > 0 {
		q.lim = q.lim.Sub(p)
	}
	c.budget = c.budget.Sub(p)
	q.out.add(p)
	if q.q.len() == 0 {
		// An empty queue holds no spare: what it did not use goes back to
		// the queues still waiting (see shareSpare).
		q.extra = q.extra.Min(Vector{})
	}
	return r
}

// Report implements Scheduler.
func (c *Credit) Report(now time.Time, u Usage) error {
	c.advance(now)
	i, ok := c.byName[u.Subscriber]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownSubscriber, u.Subscriber)
	}
	q := c.queues[i]
	corr := q.out.release(u.Requests).Sub(u.Used)
	r := q.reservation()
	q.bal = clamp(q.bal.Add(corr), c.rate(r, c.opt.Debt).Scale(-1), c.rate(r, c.opt.Burst))
	if l := q.limit(); l > 0 {
		q.lim = clamp(q.lim.Add(corr), c.rate(l, c.opt.Debt).Scale(-1), c.rate(l, c.opt.Burst))
	}
	c.budget = clamp(c.budget.Add(corr), c.rate(c.capacity, c.opt.Debt).Scale(-1), c.rate(c.capacity, c.opt.Cycle))
	q.pred.observe(now, u.Used, u.Requests)
	return nil
}

// SetCapacity implements Scheduler. The current cycle's budget moves by
// the change, so a first SetCapacity takes effect at once.
func (c *Credit) SetCapacity(now time.Time, grps float64) {
	c.advance(now)
	grps = max(grps, 0)
	old := c.capacity
	c.capacity = grps
	c.budget = clamp(c.budget.Add(c.rate(grps-old, c.opt.Cycle)), c.rate(grps, c.opt.Debt).Scale(-1), c.rate(grps, c.opt.Cycle))
}

// SetShare implements Scheduler; it takes effect from the next cycle.
func (c *Credit) SetShare(now time.Time, subscriber string, fraction float64) error {
	c.advance(now)
	if err := checkFraction(fraction); err != nil {
		return err
	}
	i, ok := c.byName[subscriber]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownSubscriber, subscriber)
	}
	c.queues[i].share = fraction
	return nil
}

// Wake implements Scheduler: credits and capacity change only at cycle
// boundaries, so the next one is the next chance.
func (c *Credit) Wake(now time.Time) (time.Time, bool) {
	c.advance(now)
	for _, q := range c.queues {
		if q.q.len() > 0 {
			return c.cycleStart.Add(c.opt.Cycle), true
		}
	}
	return time.Time{}, false
}

// Queues implements Scheduler.
func (c *Credit) Queues() []QueueState {
	out := make([]QueueState, len(c.queues))
	for i, q := range c.queues {
		out[i] = QueueState{Subscriber: q.sub.Name, Len: q.q.len(), Predicted: c.unit.Cost(q.pred.predict()), Outstanding: q.out.n}
	}
	return out
}
