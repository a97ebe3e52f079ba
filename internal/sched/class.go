package sched

import (
	"math"
	"time"
)

// classState is what a ClassScheduler keeps on each request it queued, so
// the hot path needs no map lookups or time.Time arithmetic.
type classState struct {
	cls     int32   // class index + 1; 0 when not queued here or finished
	arrival int64   // arrival, Unix ns
	due     int64   // min(arrival + class deadline, Request.Deadline), Unix ns
	keep    int64   // latest completion with more than near-zero yield, Unix ns
	started int64   // dispatch time, Unix ns
	charge  float64 // expected resource use charged at dispatch, seconds
}

// ClassScheduler is the quality-aware node scheduler of dissertation §4.4:
// one FIFO queue per service class; at each Pop it (a) drops queue heads
// whose expected yield is (near-)zero, (b) serves the class furthest below
// its guaranteed resource share, (c) otherwise picks among the class heads
// by Policy.
//
// Step (b) looks at two horizons: first the share of the resource use
// charged in the last Config.GuaranteeWindow, which makes guarantees hold
// second by second, then the dissertation's decayed usage, which lets a
// class make up a longer-run deficit from unguaranteed capacity.
//
// Resource use is the time-decayed sum u_k(t) = Σ β^(t−ct(r)) s(r) of
// Eq. 4.4.1, kept in O(1) per event. Unlike the dissertation, a dispatched
// request is charged its class's expected resource use at once and trued
// up in Finish, so several workers freed at the same instant do not all go
// to the same under-served class.
//
// Every request Pop returns must be passed to Finish exactly once. Time
// comes only from the now arguments, which must not go backwards. A
// ClassScheduler is not safe for concurrent use.
type ClassScheduler struct {
	cfg     Config
	classes []class
	index   map[string]int
	def     int
	queued  int
	// Usage is stored scaled by e^(λ·(t−epoch)) so a common decay of all
	// classes costs nothing; total is Σ of the scaled usages.
	lambda float64
	epoch  int64
	total  float64
	drops  dropWindow
	// charges holds the last GuaranteeWindow of dispatch charges and their
	// corrections at Finish; windowTotal is their sum over classes.
	charges     ring[charge]
	windowTotal float64
}

type class struct {
	ClassConfig
	q        ring[*Request]
	recent   float64 // charges within the guarantee window, s
	svc      float64 // EWMA service time, s
	svcNs    int64   // svc in ns, for the drop test
	useful   int64   // longest response time with more than near-zero yield, ns
	cost     float64 // EWMA resource use, s
	measured bool
	usage    float64 // scaled u_k
	inFlight int
	stats    ClassStats
}

var _ Scheduler = (*ClassScheduler)(nil)

// NewClassScheduler returns a scheduler for cfg, or an error wrapping
// ErrInvalidConfig.
func NewClassScheduler(cfg Config) (*ClassScheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &ClassScheduler{
		cfg:     cfg,
		classes: make([]class, len(cfg.Classes)),
		index:   make(map[string]int, len(cfg.Classes)),
		lambda:  -math.Log(cfg.Beta),
		drops:   newDropWindow(cfg.OverloadWindow),
	}
	for i, k := range cfg.Classes {
		est := k.Estimate.Seconds()
		s.classes[i] = class{ClassConfig: k, svc: est, svcNs: int64(k.Estimate), cost: est,
			useful: int64(k.Yield.usefulFor(cfg.DropBelow * k.Yield.Full))}
		s.index[k.Name] = i
		if k.Name == cfg.Default {
			s.def = i
		}
	}
	return s, nil
}

// Push queues r on its class (the default class if r.Class is empty or
// unknown). A zero r.Arrival means now.
func (s *ClassScheduler) Push(now time.Time, r *Request) {
	t := now.UnixNano()
	s.drops.advance(t)
	s.drops.arrive()
	k, ok := s.index[r.Class]
	if !ok {
		k = s.def
	}
	c := &s.classes[k]
	arr := t
	if !r.Arrival.IsZero() {
		arr = r.Arrival.UnixNano()
	}
	due := arr + int64(c.Yield.Deadline)
	if !r.Deadline.IsZero() {
		due = min(due, r.Deadline.UnixNano())
	}
	r.state = classState{cls: int32(k + 1), arrival: arr, due: due, keep: min(due, arr+c.useful)}
	c.q.push(r)
	s.queued++
	c.stats.Arrivals++
	c.stats.OfferedYield += c.Yield.Full
}

// Pop drops hopeless queue heads and returns the request to run next.
func (s *ClassScheduler) Pop(now time.Time) (*Request, []*Request) {
	t := now.UnixNano()
	s.drops.advance(t)
	mode := s.mode()
	var dropped []*Request
	s.expire(t)
	best, bestPrio := -1, math.Inf(1)
	// A class below its share of the last GuaranteeWindow comes first, then
	// one below its share of the decayed usage u_k (the dissertation's rule).
	short, shortGap := -1, 0.0
	long, longGap := -1, 0.0
	for i := range s.classes {
		c := &s.classes[i]
		var head *Request
		for c.q.n > 0 {
			head = c.q.front()
			if t+c.svcNs <= head.state.keep {
				break
			}
			c.q.pop()
			head.state.cls = 0
			s.queued--
			c.stats.Drops++
			s.drops.drop()
			dropped = append(dropped, head)
			head = nil
		}
		if head == nil {
			continue
		}
		if c.Guarantee > 0 {
			if gap := c.Guarantee - s.windowShare(c); gap > shortGap {
				short, shortGap = i, gap
			}
			if gap := c.Guarantee - s.share(c); gap > longGap {
				long, longGap = i, gap
			}
		}
		if short >= 0 || long >= 0 {
			continue // a guarantee decides; only the drops above still matter
		}
		if p := c.priority(mode, head, t); p < bestPrio {
			best, bestPrio = i, p
		}
	}
	switch {
	case short >= 0:
		best = short
	case long >= 0:
		best = long
	}
	if best < 0 {
		return nil, dropped
	}
	c := &s.classes[best]
	r := c.q.pop()
	s.queued--
	r.state.started = t
	r.state.charge = c.cost
	s.rebase(t)
	w := c.cost * s.scale(t)
	c.usage += w
	s.total += w
	s.record(t, best, c.cost)
	c.inFlight++
	c.stats.Dispatched++
	c.stats.QueueWait += time.Duration(t - r.state.arrival)
	return r, dropped
}

// Finish records that r ran for used: it replaces r's dispatch-time charge
// with used in the class's decayed usage, feeds the class's EWMAs, and
// credits the yield r realized. Requests not dispatched by s are ignored.
func (s *ClassScheduler) Finish(now time.Time, r *Request, used time.Duration) {
	c, ok := s.settle(now, r, used)
	if !ok {
		return
	}
	t := now.UnixNano()
	svc := float64(t-r.state.started) / 1e9
	if !c.measured {
		c.svc, c.cost, c.measured = svc, used.Seconds(), true
	} else {
		a := s.cfg.Smoothing
		c.svc += a * (svc - c.svc)
		c.cost += a * (used.Seconds() - c.cost)
	}
	c.svcNs = int64(c.svc * 1e9)
	c.stats.Completions++
	if t <= r.state.due {
		c.stats.RealizedYield += c.Yield.atSeconds(float64(t-r.state.arrival) / 1e9)
	}
}

// Abandon withdraws the dispatch of r, which never ran: the charge made at
// dispatch leaves the class's usage and window, and r leaves the in-flight
// count without a completion, a yield or a sample for the EWMAs (a
// zero-cost Finish would drag the class's cost and service estimates
// toward zero). Requests not dispatched by s are ignored.
func (s *ClassScheduler) Abandon(now time.Time, r *Request) {
	if c, ok := s.settle(now, r, 0); ok {
		c.stats.Abandoned++
	}
}

// settle takes r, dispatched by s, out of flight at now, replacing its
// dispatch-time charge with used in its class's decayed usage and
// guarantee window; false if s did not dispatch r or has settled it.
func (s *ClassScheduler) settle(now time.Time, r *Request, used time.Duration) (*class, bool) {
	if r.state.cls == 0 || int(r.state.cls) > len(s.classes) {
		return nil, false
	}
	t := now.UnixNano()
	k := int(r.state.cls - 1)
	c := &s.classes[k]
	r.state.cls = 0
	s.rebase(t)
	delta := used.Seconds()*s.scale(t) - r.state.charge*s.scale(r.state.started)
	c.usage = max(0, c.usage+delta)
	s.total = max(0, s.total+delta)
	s.expire(t)
	s.record(t, k, used.Seconds()-r.state.charge)
	c.inFlight--
	return c, true
}

// Len returns the number of queued requests.
func (s *ClassScheduler) Len() int { return s.queued }

// mode resolves Adaptive to the policy in force now.
func (s *ClassScheduler) mode() Policy {
	if s.cfg.Policy != Adaptive {
		return s.cfg.Policy
	}
	if float64(s.drops.sumDrops) > s.cfg.OverloadDrops*float64(s.drops.sumArrivals) {
		return Greedy
	}
	return YID
}

// scale converts resource-seconds at time t into the epoch-scaled units of
// usage and total.
func (s *ClassScheduler) scale(t int64) float64 {
	return math.Exp(s.lambda * float64(t-s.epoch) / 1e9)
}

// rebase moves the epoch to t before the scale factor grows large enough
// to cost precision (every ~13 min with β = 0.95): amortised O(1).
func (s *ClassScheduler) rebase(t int64) {
	if s.lambda*float64(t-s.epoch)/1e9 < 40 {
		return
	}
	f := 1 / s.scale(t)
	for i := range s.classes {
		s.classes[i].usage *= f
	}
	s.total *= f
	s.epoch = t
}

// share is the class's fraction of the decayed usage of all classes.
func (s *ClassScheduler) share(c *class) float64 {
	if s.total <= 0 {
		return 0
	}
	return c.usage / s.total
}

// record charges amount of resource use to class k at t in the guarantee
// window.
func (s *ClassScheduler) record(t int64, k int, amount float64) {
	s.charges.push(charge{at: t, cls: int32(k), amount: amount})
	s.classes[k].recent += amount
	s.windowTotal += amount
}

// expire drops the charges older than the guarantee window at t.
func (s *ClassScheduler) expire(t int64) {
	for s.charges.n > 0 && s.charges.front().at <= t-int64(s.cfg.GuaranteeWindow) {
		ch := s.charges.pop()
		s.classes[ch.cls].recent -= ch.amount
		s.windowTotal -= ch.amount
	}
	if s.charges.n == 0 { // shed accumulated rounding
		for i := range s.classes {
			s.classes[i].recent = 0
		}
		s.windowTotal = 0
	}
}

// windowShare is the class's fraction of the resource use charged within
// the guarantee window.
func (s *ClassScheduler) windowShare(c *class) float64 {
	if s.windowTotal <= 0 {
		return 0
	}
	return max(0, c.recent) / s.windowTotal
}

// priority is r's rank under p if dispatched at t (smaller runs first).
// r passed the drop test, so its expected yield is positive.
func (c *class) priority(p Policy, r *Request, t int64) float64 {
	if p == EDF {
		return float64(r.state.due - t)
	}
	ey := c.Yield.atSeconds(float64(t+c.svcNs-r.state.arrival) / 1e9)
	if p == Greedy {
		return c.cost / ey
	}
	return float64(r.state.due-t) / 1e9 / ey // YID
}

// ring is a FIFO in a power-of-two circular buffer.
type ring[T any] struct {
	buf  []T
	head int
	n    int
}

func (q *ring[T]) push(v T) {
	if q.n == len(q.buf) {
		buf := make([]T, max(8, 2*len(q.buf)))
		for i := range q.n {
			buf[i] = q.buf[(q.head+i)&(len(q.buf)-1)]
		}
		q.buf, q.head = buf, 0
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = v
	q.n++
}

func (q *ring[T]) front() T { return q.buf[q.head] }

func (q *ring[T]) pop() T {
	var zero T
	v := q.buf[q.head]
	q.buf[q.head] = zero
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	return v
}

// charge is resource use attributed to a class at a time, kept while it is
// inside the guarantee window.
type charge struct {
	at     int64
	cls    int32
	amount float64
}

// windowBuckets is how many slices the Adaptive drop window is kept in.
const windowBuckets = 30

// dropWindow counts arrivals and drops over a sliding window in fixed
// buckets, so the count is O(1) per event whatever the rate.
type dropWindow struct {
	width                 int64 // ns per bucket
	cur                   int64 // bucket number of the latest event
	arrivals, drops       [windowBuckets]int
	sumArrivals, sumDrops int
}

func newDropWindow(w time.Duration) dropWindow {
	return dropWindow{width: max(1, int64(w)/windowBuckets)}
}

// advance expires the buckets that fell out of the window by time t.
func (w *dropWindow) advance(t int64) {
	b := t / w.width
	if b <= w.cur {
		return
	}
	for i := w.cur + 1; i <= b && i <= w.cur+windowBuckets; i++ {
		j := i % windowBuckets
		w.sumArrivals -= w.arrivals[j]
		w.sumDrops -= w.drops[j]
		w.arrivals[j], w.drops[j] = 0, 0
	}
	w.cur = b
}

func (w *dropWindow) arrive() { w.arrivals[w.cur%windowBuckets]++; w.sumArrivals++ }

func (w *dropWindow) drop() { w.drops[w.cur%windowBuckets]++; w.sumDrops++ }
