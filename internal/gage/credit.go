package gage

import (
	"math"
	"time"
)

// Credit is the paper's request scheduler (§3.4, with the per-resource
// balances of §3.5): per-subscriber FIFO queues served by a credit-based
// weighted scheduler on a short cycle, reservations first, then the spare.
//
//  1. Reservations. Every cycle each queue's balance is credited with its
//     reservation for one cycle (a vector: reservation × unit × cycle).
//     Queues with credit left dispatch, each request charged its
//     predicted usage, until their balance is spent; a balance may end
//     negative by at most one request, the debt paid from the next
//     credits, so over time a subscriber gets its reservation exactly.
//  2. Spare. When no queue with credit waits and the capacity allows
//     more, the rest goes to the queues still non-empty in proportion to
//     their reservations, not their demand (§4.2.2).
//
// Where this departs from the paper's text, and why (each found by the
// simulation in lab/gagesim):
//
//   - The capacity is paced continuously (see pacer) rather than a cycle's
//     worth at the start of each cycle, so the order of dispatches within
//     a cycle matters. The paper visits the queues in a cyclic order and
//     drains each "until the balance becomes negative"; with paced
//     capacity a visit outlasts the cycle, balances pile up to their cap
//     and each visit becomes a burst (the served rate swung ±10% with a
//     300 ms period). So round 1 serves the queue most owed (the most
//     cycles of credit left) first: the same requests per cycle,
//     interleaved.
//   - The paper's round 2 credits each non-empty queue its fraction of the
//     spare and dispatches while that credit lasts. At request granularity
//     that either overshoots (every queue with a sliver of credit sends a
//     whole request, so a spare of half a request becomes four) or wastes
//     (a sliver smaller than a request never sends one), and the overshoot
//     is paid by the next cycle's reservations (10% jitter over 100 ms).
//     So round 2 keeps the proportion as a running count instead: each
//     queue's spare served so far over its reservation; the spare goes one
//     request at a time to the waiting queue with the least, and a queue
//     that turns busy starts level with the busy ones (idling banks
//     nothing). This is start-time fair queueing on the spare: the paper's
//     shares, overshooting by at most one request in all, and using the
//     whole spare whenever anyone waits.
//   - While some queue is in debt beyond one request (its requests cost
//     more than predicted), round 1 may run ahead of the pacer by up to
//     Burst's worth of capacity; round 2 always waits for the pacer to be
//     open. The overrun's correction puts both the overrunner's balance
//     and the shared pacer in debt. If round 1 waited for the pacer,
//     every other subscriber's reserved service would stop until the
//     pacer had repaid the overrun (at the whole capacity's rate, sooner
//     than the overrunner's balance at its reservation's rate), and the
//     capacity the overrunner then leaves unused while it repays would
//     come back to the others as spare: one subscriber's large request
//     moved the others' service around in time (in a test, a subscriber
//     within its reservation got 24% of it for half a second, then 175%).
//     Reservations are admitted against the capacity (Admit), so the
//     others' round 1 is within it; the overrun is paid by the
//     overrunner's wait. Only while there is an overrun: with none, round
//     1 running ahead would spend the pacer's budget at each cycle's
//     credit and leave round 2 jittering (deviation at 100 ms from 0% to
//     7% with constant sizes). On the SPECweb99-like mix in simulation
//     this took the deviation at 1 s windows from 10.0% to 8.6% and at
//     4 s from 2.5% to 2.0% (means of six seeds); the smoother mixes did
//     not move.
//   - A queue in debt beyond that one-request overshoot (its requests cost
//     more than predicted) takes no spare while another queue waits for
//     it, until the debt is paid; in the paper this falls out of having
//     one balance for both rounds.
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
	opt    Options
	unit   Unit
	queues []*creditQueue
	byName subscriberIndex
	pace   pacer

	started    bool
	cycleStart time.Time
	// reserved is the sum of the reservations (at this gateway's shares)
	// per second, kept as shares change: trueSpare reads it on every
	// report.
	reserved Vector
}

type creditQueue struct {
	subQueue
	bal   Vector  // reservation credit
	spare float64 // spare served (GRU, predicted, corrected by reports) divided by weight
	lim   Vector  // limit credit
	// outSpare is the part of out dispatched in round 2, whose
	// corrections go to spare rather than to bal.
	outSpare inflight
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
	c := &Credit{opt: opt, unit: u, byName: subscriberIndex{}, pace: pacer{unit: u, burst: opt.Burst, debt: opt.Debt}}
	for _, s := range cfg.All() {
		c.byName[s.Name] = len(c.queues)
		q := &creditQueue{subQueue: newSubQueue(s, opt)}
		c.queues = append(c.queues, q)
		c.reserved = c.reserved.Add(c.rate(q.reservation(), time.Second))
	}
	return c, nil
}

// rate turns a rate in GRPS and a duration into a resource vector.
func (c *Credit) rate(grps float64, d time.Duration) Vector {
	return c.unit.Times(grps * seconds(d))
}

// advance moves the clock to now: the capacity budget refills for the
// time elapsed (see pacer), and credits are given for as many cycles as
// have begun.
func (c *Credit) advance(now time.Time) {
	c.pace.advance(now)
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
		q.bal = refill(q.bal, c.rate(r, c.opt.Cycle).Scale(n), c.rate(r, c.opt.Burst))
		if l := q.limit(); l > 0 {
			q.lim = refill(q.lim, c.rate(l, c.opt.Cycle).Scale(n), c.rate(l, c.opt.Burst))
		}
	}
}

// Enqueue implements Scheduler.
func (c *Credit) Enqueue(now time.Time, r Request) error {
	c.advance(now)
	i, err := c.byName.find(r.Subscriber)
	if err != nil {
		return err
	}
	q := c.queues[i]
	if q.q.len() >= c.opt.MaxQueue {
		return ErrQueueFull
	}
	if q.q.len() == 0 {
		// Turning busy: level with the busy queues' spare, so idling
		// banks no claim on it (nor loses one).
		lo := math.Inf(1)
		for _, o := range c.queues {
			if o.q.len() > 0 {
				lo = min(lo, o.spare)
			}
		}
		if !math.IsInf(lo, 1) {
			q.spare = max(q.spare, lo)
		}
	}
	q.q.push(r)
	return nil
}

// Next implements Scheduler.
func (c *Credit) Next(now time.Time) (Request, bool) {
	c.advance(now)
	// Round 1: reservations, which an overrun's debt in the pacer does
	// not hold back (see the type's doc).
	open := c.pace.open()
	if !open && !(c.overrun() && c.pace.within(c.opt.Burst)) {
		return Request{}, false
	}
	if i, ok := c.pickReserved(); ok {
		q := c.queues[i]
		p := c.dispatch(q)
		q.bal = q.bal.Sub(p)
		return q.q.pop(), true
	}
	// Round 2, only while the pacer is open: the spare, to the waiting
	// queue that has had the least of it for its reservation.
	if !open {
		return Request{}, false
	}
	// A queue in debt beyond the one-request overshoot round 1 allows
	// used more than it was charged (its requests cost more than
	// predicted) and pays that back before it shares the spare; otherwise
	// the capacity its debt holds back in round 1 would come straight back
	// to it here and the correction would change nothing. But only while
	// another queue waits for the spare: with none, holding a debtor back
	// leaves the capacity unused and pays nothing to anyone. (Round 1
	// keeps a balance near zero, so the corrections of many spare requests,
	// each a little off, put a small reservation in debt all the time;
	// paid back only at that reservation's rate, its requests were refused
	// on an idle cluster: TestSpareSurvivesNoisyCosts.)
	var best, debtor *creditQueue
	for _, q := range c.queues {
		if !c.eligible(q) {
			continue
		}
		if !c.unit.withinOne(q.bal, q.pred.predict()) {
			if debtor == nil || q.spare < debtor.spare {
				debtor = q
			}
			continue
		}
		if best == nil || q.spare < best.spare {
			best = q
		}
	}
	if best == nil {
		best = debtor
	}
	if best == nil {
		return Request{}, false
	}
	p := c.dispatch(best)
	best.spare += c.unit.Cost(p) / best.weight()
	best.outSpare.add(p)
	return best.q.pop(), true
}

// eligible reports whether q has a request and room under its limit.
func (c *Credit) eligible(q *creditQueue) bool {
	return q.q.len() > 0 && (q.sub.Limit == 0 || c.unit.positive(q.lim))
}

// pickReserved finds the eligible queue with the most reservation credit
// left, in cycles of its own credit (the bottleneck resource's), if any
// has credit left.
//
// The paper visits the queues in a cyclic order and drains each "until
// the balance becomes negative" (§3.4), all at the start of the cycle,
// when the whole cycle's capacity is there to spend. Here the capacity is
// spread over the cycle (see advance), so the order of dispatches within
// a cycle shows: draining queue by queue, a visit outlasts the cycle,
// balances pile up to their cap, and each visit becomes a burst of up to
// Burst's worth (in simulation the served rate then swung ±10% with a
// 300 ms period). Serving the most owed first gives the same requests
// over a cycle, interleaved. Ties go to config order.
func (c *Credit) pickReserved() (int, bool) {
	best, most := -1, 0.0
	for i, q := range c.queues {
		if !c.eligible(q) || !c.unit.positive(q.bal) {
			continue
		}
		credit := c.rate(q.reservation(), c.opt.Cycle)
		owed := math.Inf(1)
		for r, x := range c.unit {
			if x > 0 {
				owed = min(owed, q.bal[r]/credit[r])
			}
		}
		if best < 0 || owed > most {
			best, most = i, owed
		}
	}
	return best, best >= 0
}

// dispatch charges q's head its predicted usage against the capacity and
// q's limit, and returns the charge; the caller charges the round's
// credit and pops the request.
func (c *Credit) dispatch(q *creditQueue) Vector {
	p := q.pred.predict()
	if q.sub.Limit > 0 {
		q.lim = q.lim.Sub(p)
	}
	c.pace.charge(p)
	q.out.add(p)
	return p
}

// Cancel implements Scheduler.
func (c *Credit) Cancel(now time.Time, r Request) bool {
	c.advance(now)
	i, err := c.byName.find(r.Subscriber)
	return err == nil && c.queues[i].q.remove(r.ID)
}

// Report implements Scheduler.
func (c *Credit) Report(now time.Time, u Usage) error {
	c.advance(now)
	i, err := c.byName.find(u.Subscriber)
	if err != nil {
		return err
	}
	q := c.queues[i]
	pred, predSpare, usedSpare := q.release(u)
	// A spare request's correction goes to the spare it was served from,
	// in the part of the capacity that is truly spare (beyond all the
	// reservations), and to the reservation balance in the rest. Charged
	// to the balance alone, the corrections of many spare requests, each a
	// little off, kept it in debt (round 1 keeps it near zero) and the
	// subscriber out of the spare: a small reservation with variable costs
	// got 80 GRPS of spare where an equal one with constant costs got 120
	// (TestNoisyCostsKeepTheirShareOfTheSpare). Charged to the spare
	// alone, where there is no true spare (reservations equal to the
	// capacity, spare only from mispredictions), an overrun escaped the
	// reservation it was taken from (TestCreditChargesActualUsage).
	f := c.trueSpare()
	toSpare := predSpare.Sub(usedSpare).Scale(f)
	q.spare += (c.unit.Cost(predSpare.Sub(toSpare)) - c.unit.Cost(predSpare)) / q.weight()
	corrAll := pred.Sub(u.Used)
	corr := corrAll.Sub(toSpare)
	// Corrections are bounded the same both ways (Debt): a refund is
	// service owed just as an overrun is service owed back, and a cap on
	// refunds only (the Burst cap of idle credit) made a subscriber whose
	// requests turned cheaper lose what it had been overcharged.
	r := q.reservation()
	q.bal = clamp(q.bal.Add(corr), c.rate(r, c.opt.Debt).Scale(-1), c.rate(r, c.opt.Debt))
	if l := q.limit(); l > 0 {
		q.lim = clamp(q.lim.Add(corrAll), c.rate(l, c.opt.Debt).Scale(-1), c.rate(l, c.opt.Debt))
	}
	c.pace.correct(corrAll)
	q.pred.observe(now, u.Used, u.Requests)
	return nil
}

// SetCapacity implements Scheduler.
func (c *Credit) SetCapacity(now time.Time, capacity Vector) {
	c.advance(now)
	c.pace.set(capacity)
}

// SetShare implements Scheduler; it takes effect from the next cycle.
func (c *Credit) SetShare(now time.Time, subscriber string, fraction float64) error {
	c.advance(now)
	if err := checkFraction(fraction); err != nil {
		return err
	}
	i, err := c.byName.find(subscriber)
	if err != nil {
		return err
	}
	q := c.queues[i]
	c.reserved = c.reserved.Sub(c.rate(q.reservation(), time.Second))
	q.share = fraction
	c.reserved = c.reserved.Add(c.rate(q.reservation(), time.Second))
	return nil
}

// Wake implements Scheduler: when the budget is positive again if it is
// spent; otherwise what holds requests back is credit or a limit, given
// at the next cycle.
func (c *Credit) Wake(now time.Time) (time.Time, bool) {
	c.advance(now)
	busy := false
	for _, q := range c.queues {
		busy = busy || q.q.len() > 0
	}
	if !busy {
		return time.Time{}, false
	}
	next := c.cycleStart.Add(c.opt.Cycle)
	if c.pace.open() {
		return next, true
	}
	at, ok := c.pace.opensAt(now)
	if !ok {
		return time.Time{}, false
	}
	if at.After(next) {
		return next, true // harmless: Next says no, and Wake is asked again
	}
	return at, true
}

// Queues implements Scheduler.
func (c *Credit) Queues() []QueueState {
	out := make([]QueueState, len(c.queues))
	for i, q := range c.queues {
		out[i] = q.state(c.unit)
	}
	return out
}

// release takes the requests u reports out of q's outstanding ones, from
// both rounds in proportion to what each has out, and returns the
// predictions released, the part of them round 2 dispatched, and u's usage
// split in proportion to those predictions.
func (q *creditQueue) release(u Usage) (pred, predSpare, usedSpare Vector) {
	spareN := 0
	if q.out.n > 0 {
		spareN = int(math.Round(float64(min(u.Requests, q.out.n)) * float64(q.outSpare.n) / float64(q.out.n)))
	}
	predSpare = q.outSpare.release(spareN)
	pred = q.out.release(u.Requests)
	for r := range usedSpare {
		if pred[r] > 0 {
			usedSpare[r] = u.Used[r] * min(predSpare[r]/pred[r], 1)
		}
	}
	return pred, predSpare, usedSpare
}

// trueSpare is the fraction of the capacity beyond every reservation (at
// this gateway's shares), in the bottleneck resource: 0 when the
// reservations take it all.
func (c *Credit) trueSpare() float64 {
	f := 1.0
	for r, x := range c.unit {
		if x > 0 {
			if capR := c.pace.capacity[r]; capR > 0 {
				f = min(f, max(0, 1-c.reserved[r]/capR))
			} else {
				f = 0
			}
		}
	}
	return f
}

// overrun reports whether a queue is in debt beyond one predicted request.
func (c *Credit) overrun() bool {
	for _, q := range c.queues {
		if !c.unit.withinOne(q.bal, q.pred.predict()) {
			return true
		}
	}
	return false
}
