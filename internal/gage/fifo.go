package gage

import (
	"time"
)

// FIFO is the gateway with reservations off: one queue in arrival order,
// paced by capacity like the others, with no per-subscriber anything. It is
// the baseline of the isolation experiment (what a plain reverse proxy
// with a queue does) and the mode for measuring what reservations cost.
// Limits are ignored too.
type FIFO struct {
	opt    Options
	unit   Unit
	byName subscriberIndex
	names  []string
	pred   []predictor
	out    []inflight
	lens   []int
	q      ring
	pace   pacer
}

var _ Scheduler = (*FIFO)(nil)

// NewFIFO returns the FIFO scheduler; its queue holds MaxQueue requests per
// subscriber of cfg, the same total buffer as the other schedulers.
func NewFIFO(cfg Config, opt Options) (*FIFO, error) {
	u, opt, err := prepare("fifo", cfg, opt)
	if err != nil {
		return nil, err
	}
	f := &FIFO{opt: opt, unit: u, byName: subscriberIndex{}, pace: pacer{unit: u, burst: opt.Burst, debt: opt.Debt}}
	for _, s := range cfg.All() {
		f.byName[s.Name] = len(f.names)
		f.names = append(f.names, s.Name)
		f.pred = append(f.pred, predictor{alpha: opt.Alpha, period: opt.AccountingCycle, m: opt.Initial})
	}
	f.out = make([]inflight, len(f.names))
	f.lens = make([]int, len(f.names))
	return f, nil
}

func (f *FIFO) advance(now time.Time) { f.pace.advance(now) }

// Enqueue implements Scheduler.
func (f *FIFO) Enqueue(now time.Time, r Request) error {
	f.advance(now)
	i, err := f.byName.find(r.Subscriber)
	if err != nil {
		return err
	}
	if f.q.len() >= f.opt.MaxQueue*len(f.names) {
		return ErrQueueFull
	}
	f.q.push(r)
	f.lens[i]++
	return nil
}

// Next implements Scheduler.
func (f *FIFO) Next(now time.Time) (Request, bool) {
	f.advance(now)
	if !f.pace.open() || f.q.len() == 0 {
		return Request{}, false
	}
	r := f.q.pop()
	i := f.byName[r.Subscriber]
	f.lens[i]--
	p := f.pred[i].predict()
	f.pace.charge(p)
	f.out[i].add(p)
	return r, true
}

// Cancel implements Scheduler.
func (f *FIFO) Cancel(now time.Time, r Request) bool {
	f.advance(now)
	i, err := f.byName.find(r.Subscriber)
	if err != nil || !f.q.remove(r.ID) {
		return false
	}
	f.lens[i]--
	return true
}

// Report implements Scheduler.
func (f *FIFO) Report(now time.Time, u Usage) error {
	f.advance(now)
	i, err := f.byName.find(u.Subscriber)
	if err != nil {
		return err
	}
	f.pace.correct(f.out[i].release(u.Requests).Sub(u.Used))
	f.pred[i].observe(now, u.Used, u.Requests)
	return nil
}

// SetCapacity implements Scheduler.
func (f *FIFO) SetCapacity(now time.Time, capacity Vector) {
	f.advance(now)
	f.pace.set(capacity)
}

// SetShare implements Scheduler; FIFO has no shares, so only the
// arguments are checked.
func (f *FIFO) SetShare(_ time.Time, subscriber string, fraction float64) error {
	if err := checkFraction(fraction); err != nil {
		return err
	}
	if _, err := f.byName.find(subscriber); err != nil {
		return err
	}
	return nil
}

// Wake implements Scheduler.
func (f *FIFO) Wake(now time.Time) (time.Time, bool) {
	f.advance(now)
	if f.q.len() == 0 {
		return time.Time{}, false
	}
	if f.pace.open() {
		return now, true
	}
	return f.pace.opensAt(now)
}

// Queues implements Scheduler.
func (f *FIFO) Queues() []QueueState {
	out := make([]QueueState, len(f.names))
	for i, n := range f.names {
		out[i] = QueueState{Subscriber: n, Len: f.lens[i], Predicted: f.unit.Cost(f.pred[i].predict()), Outstanding: f.out[i].n}
	}
	return out
}
