package gage

import (
	"math"
	"time"
)

// Tag is an mClock-style tag scheduler (Gulati, Merchant and Varman,
// "mClock: Handling Throughput Variability for Hypervisor IO Scheduling",
// OSDI 2010), the contender to Credit on the same inputs.
//
// Each request gets three tags from its predecessor's, spaced by its
// predicted cost c in GRU: reservation R = max(R' + c/r, arrival), limit
// L = max(L' + c/l, arrival) and proportional share P = max(P' + c/w,
// arrival), with weight w = the reservation (so spare goes in proportion to
// reservations, as in Gage). Whenever capacity allows a dispatch:
//
//   - constraint phase: the head with the smallest R tag ≤ now goes, which
//     meets reservations;
//   - weight phase: otherwise the head with the smallest P tag among those
//     whose L tag ≤ now goes, and its queue's R tags are pulled back by c/r
//     so service from spare does not count against the reservation.
//
// A queue that becomes busy after idling starts its P tags at the smallest
// P tag of the busy queues, so idling neither banks nor loses share.
//
// The differences from Credit are the point of comparing them: a request's
// tags are fixed from the prediction at the time it reaches the head, and
// reported usage only improves later predictions; nothing corrects what was
// already charged; and a request has one cost, its bottleneck's, where
// Credit keeps a balance per resource. Capacity is paced the same way in
// both (see pacer), so the comparison is between the per-subscriber
// mechanisms.
type Tag struct {
	opt    Options
	unit   Unit
	queues []*tagQueue
	byName subscriberIndex
	pace   pacer

	started bool
	epoch   time.Time
}

type tagQueue struct {
	subQueue
	// Tags of the last request dispatched, seconds since epoch.
	r, l, p float64
	// The head's tags and cost, valid while head is true.
	head           bool
	hr, hl, hp, hc float64
	hv             Vector // the head's predicted usage
}

var _ Scheduler = (*Tag)(nil)

// NewTag returns the tag scheduler for cfg's subscribers (the default one
// included).
func NewTag(cfg Config, opt Options) (*Tag, error) {
	u, opt, err := prepare("tag", cfg, opt)
	if err != nil {
		return nil, err
	}
	t := &Tag{opt: opt, unit: u, byName: subscriberIndex{}, pace: pacer{unit: u, burst: opt.Burst, debt: opt.Debt}}
	for _, s := range cfg.All() {
		t.byName[s.Name] = len(t.queues)
		t.queues = append(t.queues, &tagQueue{subQueue: newSubQueue(s, opt), r: math.Inf(-1), l: math.Inf(-1), p: math.Inf(-1)})
	}
	return t, nil
}

func (t *Tag) secs(now time.Time) float64 { return now.Sub(t.epoch).Seconds() }

func (t *Tag) advance(now time.Time) {
	t.pace.advance(now)
	if !t.started {
		t.started, t.epoch = true, now
	}
}

// tagHead computes the tags of q's head if it has none.
func (t *Tag) tagHead(q *tagQueue, minP float64) {
	if q.head || q.q.len() == 0 {
		return
	}
	arr := t.secs(q.q.peek().Arrived)
	q.hv = q.pred.predict()
	q.hc = t.unit.Cost(q.hv)
	q.hr = math.Inf(1)
	if r := q.reservation(); r > 0 {
		q.hr = max(q.r+q.hc/r, arr)
	}
	q.hl = math.Inf(-1)
	if l := q.limit(); l > 0 {
		q.hl = max(q.l+q.hc/l, arr)
	}
	q.hp = max(q.p+q.hc/q.weight(), arr, minP)
	q.head = true
}

// Enqueue implements Scheduler.
func (t *Tag) Enqueue(now time.Time, r Request) error {
	t.advance(now)
	i, err := t.byName.find(r.Subscriber)
	if err != nil {
		return err
	}
	q := t.queues[i]
	if q.q.len() >= t.opt.MaxQueue {
		return ErrQueueFull
	}
	wasIdle := q.q.len() == 0
	q.q.push(r)
	if wasIdle {
		// A queue turning busy starts its share where the busy ones are.
		t.tagHead(q, t.minBusyP(q))
	}
	return nil
}

// minBusyP is the smallest P tag of the busy queues other than skip, or
// -Inf if none is busy.
func (t *Tag) minBusyP(skip *tagQueue) float64 {
	m := math.Inf(1)
	for _, q := range t.queues {
		if q != skip && q.head {
			m = min(m, q.hp)
		}
	}
	if math.IsInf(m, 1) {
		return math.Inf(-1)
	}
	return m
}

// Next implements Scheduler.
func (t *Tag) Next(now time.Time) (Request, bool) {
	t.advance(now)
	if !t.pace.open() {
		return Request{}, false
	}
	s := t.secs(now)
	var best *tagQueue
	for _, q := range t.queues {
		if q.head && q.hr <= s && (best == nil || q.hr < best.hr) {
			best = q
		}
	}
	if best != nil {
		best.r = best.hr
		return t.dispatch(best), true
	}
	for _, q := range t.queues {
		if q.head && q.hl <= s && (best == nil || q.hp < best.hp) {
			best = q
		}
	}
	if best == nil {
		return Request{}, false
	}
	if r := best.reservation(); r > 0 {
		best.r = best.hr - best.hc/r
	}
	return t.dispatch(best), true
}

func (t *Tag) dispatch(q *tagQueue) Request {
	if q.limit() > 0 {
		q.l = q.hl
	}
	q.p = q.hp
	t.pace.charge(q.hv)
	q.out.add(q.hv)
	q.head = false
	r := q.q.pop()
	t.tagHead(q, math.Inf(-1))
	return r
}

// Cancel implements Scheduler. A cancelled head's tags go with it: the
// next head is tagged from the last dispatch, as after a dispatch.
func (t *Tag) Cancel(now time.Time, r Request) bool {
	t.advance(now)
	i, err := t.byName.find(r.Subscriber)
	if err != nil {
		return false
	}
	q := t.queues[i]
	wasHead := q.q.len() > 0 && q.q.peek().ID == r.ID
	if !q.q.remove(r.ID) {
		return false
	}
	if wasHead {
		q.head = false
		t.tagHead(q, math.Inf(-1))
	}
	return true
}

// Report implements Scheduler: the capacity budget is corrected, the
// prediction updated; tags already given stay.
func (t *Tag) Report(now time.Time, u Usage) error {
	t.advance(now)
	i, err := t.byName.find(u.Subscriber)
	if err != nil {
		return err
	}
	q := t.queues[i]
	t.pace.correct(q.out.release(u.Requests).Sub(u.Used))
	q.pred.observe(now, u.Used, u.Requests)
	return nil
}

// SetCapacity implements Scheduler.
func (t *Tag) SetCapacity(now time.Time, capacity Vector) {
	t.advance(now)
	t.pace.set(capacity)
}

// SetShare implements Scheduler; it applies from the next head's tags.
func (t *Tag) SetShare(now time.Time, subscriber string, fraction float64) error {
	t.advance(now)
	if err := checkFraction(fraction); err != nil {
		return err
	}
	i, err := t.byName.find(subscriber)
	if err != nil {
		return err
	}
	t.queues[i].share = fraction
	return nil
}

// Wake implements Scheduler: when the budget is positive again and some
// head's R or L tag has come.
func (t *Tag) Wake(now time.Time) (time.Time, bool) {
	t.advance(now)
	due := math.Inf(1)
	for _, q := range t.queues {
		if q.head {
			due = min(due, q.hr, max(q.hl, 0))
		}
	}
	if math.IsInf(due, 1) {
		return time.Time{}, false
	}
	at := t.epoch.Add(time.Duration(math.Ceil(due * 1e9)))
	if !t.pace.open() {
		opens, ok := t.pace.opensAt(now)
		if !ok {
			return time.Time{}, false
		}
		at = later(at, opens)
	}
	return later(at, now), true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Queues implements Scheduler.
func (t *Tag) Queues() []QueueState {
	out := make([]QueueState, len(t.queues))
	for i, q := range t.queues {
		out[i] = q.state(t.unit)
	}
	return out
}
