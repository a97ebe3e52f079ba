package gagesim

import (
	"math/rand/v2"
	"time"
)

// engine is a discrete-event loop: a virtual clock and one event heap
// ordered by time, ties in scheduling order, so a run is deterministic for
// a seed. It has the shape of lab/sim's Engine (At, After, Now, Time,
// RunUntil, Rand streams) so this package can move onto that one engine
// once both trees have met, by changing only the constructor.
type engine struct {
	epoch time.Time
	seed  uint64
	now   time.Duration
	seq   uint64
	queue []event
}

type event struct {
	at  time.Duration
	seq uint64
	fn  func()
}

func newEngine(epoch time.Time, seed uint64) *engine { return &engine{epoch: epoch, seed: seed} }

// Now is the virtual time since the start of the run.
func (e *engine) Now() time.Duration { return e.now }

// Time is Now as the instant the pure cores are given.
func (e *engine) Time() time.Time { return e.epoch.Add(e.now) }

// At schedules fn at virtual time t (now if t is past).
func (e *engine) At(t time.Duration, fn func()) {
	e.push(event{at: max(t, e.now), seq: e.seq, fn: fn})
	e.seq++
}

// After schedules fn d from now.
func (e *engine) After(d time.Duration, fn func()) { e.At(e.now+d, fn) }

// RunUntil runs the events due by end, in order; later ones stay queued.
func (e *engine) RunUntil(end time.Duration) {
	for len(e.queue) > 0 && e.queue[0].at <= end {
		ev := e.pop()
		e.now = ev.at
		ev.fn()
	}
	e.now = max(e.now, end)
}

// Rand is the random stream number stream of the run's seed: arrivals,
// sizes and placement draw from separate streams, so contenders run on
// the same seed see the same arrivals (common random numbers).
func (e *engine) Rand(stream uint64) *rand.Rand { return rand.New(rand.NewPCG(e.seed, stream)) }

func (e *engine) less(i, j int) bool {
	q := e.queue
	return q[i].at < q[j].at || (q[i].at == q[j].at && q[i].seq < q[j].seq)
}

func (e *engine) push(x event) {
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

func (e *engine) pop() event {
	q := e.queue
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q[n] = event{}
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
