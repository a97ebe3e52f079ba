// Package sim is the lab's discrete-event engine: a virtual clock, one
// event queue (a binary heap ordered by time, ties in scheduling order) and
// seeded random streams. The load-balancing, class-scheduling and
// aggregation simulations (lbsim, schedsim, dacsim) all run on it and drive
// the same policy code the nodes run, so a figure of the simulator and a
// measurement on real nodes exercise one implementation.
//
// A run is deterministic: the same seed and the same sequence of At calls
// give the same sequence of events.
package sim

import (
	"math/rand/v2"
	"time"
)

// Engine is a virtual clock and the queue of events of type E scheduled on
// it. E is whatever a simulation needs: a small struct it switches on (the
// cheapest when a run has millions of events) or a func() to call.
type Engine[E any] struct {
	epoch time.Time
	seed  uint64
	now   time.Duration
	seq   uint64 // scheduling order, the tie-breaker
	queue []entry[E]
}

type entry[E any] struct {
	at  time.Duration
	seq uint64
	ev  E
}

// New returns an engine whose clock starts at epoch (what Time reports at
// virtual time zero) and whose random streams derive from seed.
func New[E any](epoch time.Time, seed uint64) *Engine[E] {
	return &Engine[E]{epoch: epoch, seed: seed}
}

// Now is the virtual time since the start of the run.
func (e *Engine[E]) Now() time.Duration { return e.now }

// Time is Now as a wall-clock instant, for the policy code, which takes
// time.Time.
func (e *Engine[E]) Time() time.Time { return e.epoch.Add(e.now) }

// At schedules ev at virtual time t; a time already past means now.
func (e *Engine[E]) At(t time.Duration, ev E) {
	e.push(entry[E]{at: max(t, e.now), seq: e.seq, ev: ev})
	e.seq++
}

// After schedules ev d after now.
func (e *Engine[E]) After(d time.Duration, ev E) { e.At(e.now+d, ev) }

// Len is the number of events scheduled and not yet run.
func (e *Engine[E]) Len() int { return len(e.queue) }

// Next is the time of the earliest scheduled event; ok is false if none is.
func (e *Engine[E]) Next() (at time.Duration, ok bool) {
	if len(e.queue) == 0 {
		return 0, false
	}
	return e.queue[0].at, true
}

// Step removes the earliest event, moves the clock to its time and returns
// it; ok is false if nothing is scheduled.
func (e *Engine[E]) Step() (ev E, ok bool) {
	if len(e.queue) == 0 {
		return ev, false
	}
	top := e.pop()
	e.now = top.at
	return top.ev, true
}

// Run hands every event to handle in time order until none is left
// (handle may schedule more).
func (e *Engine[E]) Run(handle func(E)) {
	for ev, ok := e.Step(); ok; ev, ok = e.Step() {
		handle(ev)
	}
}

// RunUntil is Run for the events due by end; later ones stay queued.
func (e *Engine[E]) RunUntil(end time.Duration, handle func(E)) {
	for at, ok := e.Next(); ok && at <= end; at, ok = e.Next() {
		ev, _ := e.Step()
		handle(ev)
	}
}

// Rand returns the random stream number stream of this run's seed. A
// simulation draws each independent kind of randomness from its own stream
// (arrivals, service times, each client's policy…) so that contenders run
// with the same seed see the same arrivals whatever their own draws (common
// random numbers), and adding a draw to one stream shifts no other.
func (e *Engine[E]) Rand(stream uint64) *rand.Rand { return Rand(e.seed, stream) }

// Rand is Engine.Rand for code that draws outside a run, such as an
// arrival trace built before it or replayed on real nodes.
func Rand(seed, stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, stream)) }

func (e *Engine[E]) less(i, j int) bool {
	q := e.queue
	return q[i].at < q[j].at || (q[i].at == q[j].at && q[i].seq < q[j].seq)
}

func (e *Engine[E]) push(x entry[E]) {
	e.queue = append(e.queue, x)
	for i := len(e.queue) - 1; i > 0; {
		p := (i - 1) / 2
		if !e.less(i, p) {
			break
		}
		e.queue[i], e.queue[p] = e.queue[p], e.queue[i]
		i = p
	}
}

func (e *Engine[E]) pop() entry[E] {
	q := e.queue
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	var zero entry[E]
	q[n] = zero // let a popped func() or pointer be collected
	e.queue = q[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && e.less(l, m) {
			m = l
		}
		if l+1 < n && e.less(l+1, m) {
			m = l + 1
		}
		if m == i {
			break
		}
		e.queue[i], e.queue[m] = e.queue[m], e.queue[i]
		i = m
	}
	return top
}
