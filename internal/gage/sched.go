package gage

import (
	"errors"
	"fmt"
	"time"
)

// Request is one request waiting at a gateway. The scheduler only orders
// them; the gateway keeps the request itself under ID.
type Request struct {
	ID         uint64
	Subscriber string
	// Arrived is when the request was classified. The tag scheduler spaces
	// its tags from it; the others only carry it.
	Arrived time.Time
}

// Usage is what a node measured for a subscriber's completed requests
// during one accounting cycle (§3.5): how many completed and the resources
// they used in total. A gateway also reports requests that failed or were
// abandoned after dispatch (with what they used, possibly nothing), so the
// scheduler's count of outstanding requests drains.
type Usage struct {
	Subscriber string
	Requests   int
	Used       Vector
}

// Scheduler decides which waiting request a gateway dispatches next. It is
// a pure state machine: every method takes the current time, nothing
// happens between calls, and the same inputs give the same decisions.
//
// The shell's loop: Enqueue each classified request (ErrQueueFull means
// reject it with 429); after any input, call Next until it says false and
// send what it returns; then sleep until Wake, or the next input. Feed node
// usage reports to Report, the estimated capacity to SetCapacity and, with
// several gateways, this gateway's share of each reservation to SetShare.
type Scheduler interface {
	// Enqueue adds r at the tail of its subscriber's queue.
	Enqueue(now time.Time, r Request) error
	// Next returns the request to dispatch now, if any may go.
	Next(now time.Time) (Request, bool)
	// Cancel takes a request still waiting out of its queue (its client
	// gave up: the wait bound, the deadline, a closed connection), so it
	// is never dispatched and costs its subscriber nothing, neither
	// credit nor share of the spare. It reports whether r was waiting.
	Cancel(now time.Time, r Request) bool
	// Report accounts for measured usage: it corrects the charges made at
	// dispatch, which were predictions, and updates the predictions.
	Report(now time.Time, u Usage) error
	// SetCapacity sets the capacity this gateway may dispatch, in
	// resources per second (Unit.Times turns GRPS into one).
	SetCapacity(now time.Time, capacity Vector)
	// SetShare sets the fraction (0..1, initially 1) of a subscriber's
	// reservation and limit that this gateway enforces.
	SetShare(now time.Time, subscriber string, fraction float64) error
	// Wake is when Next may next return a request with no new input; ok is
	// false when nothing waits.
	Wake(now time.Time) (t time.Time, ok bool)
	// Queues describes each subscriber's queue, in config order.
	Queues() []QueueState
}

// QueueState is one subscriber's queue as a scheduler sees it.
type QueueState struct {
	Subscriber string
	Len        int
	// Predicted is the cost in GRU charged at dispatch for the next request
	// (§3.4's M_k).
	Predicted float64
	// Outstanding is the number of requests dispatched and not yet
	// reported.
	Outstanding int
}

// Errors of the schedulers.
var (
	ErrQueueFull         = errors.New("gage: subscriber queue full")
	ErrUnknownSubscriber = errors.New("gage: unknown subscriber")
)

// Options tune a scheduler; the zero value of each field means its default.
type Options struct {
	// Cycle is the scheduling cycle (default 10 ms, §3.4: "set to be 10
	// msec for responsiveness"): reservation and limit credits are handed
	// out per cycle.
	Cycle time.Duration
	// Burst is how much unused reservation a subscriber may bank while
	// idle, how far above its limit it may burst, and how much unused
	// capacity the gateway may send at once, as a duration of the rate
	// (default 100 ms). The paper leaves this open; without a cap an idle
	// subscriber would bank credit without bound and later take a burst
	// from the others' reservations.
	Burst time.Duration
	// Debt bounds what usage corrections may move a balance, either way,
	// as a duration of its rate (default 1 s): a bad estimate costs a
	// subscriber at most that much service (no unbounded starvation), and
	// earns it at most that much. The capacity budget's debt is bounded
	// the same way.
	Debt time.Duration
	// Alpha is the smoothing of the per-subscriber cost prediction, α in
	// §3.4's M_k = α·M_{k-1} + (1-α)·P_k (default 0.7; the paper gives no
	// value).
	Alpha float64
	// AccountingCycle is the period over which usage reports are averaged
	// into one P_k before being folded into the prediction (default
	// 100 ms, the accounting cycle).
	AccountingCycle time.Duration
	// MaxQueue bounds each subscriber's queue (default 256); FIFO bounds
	// its one queue at MaxQueue per subscriber.
	MaxQueue int
	// Initial is the predicted usage of a request before any report
	// (default one unit).
	Initial Vector
}

func (o Options) withDefaults(u Unit) (Options, error) {
	if o.Cycle < 0 || o.Burst < 0 || o.Debt < 0 || o.AccountingCycle < 0 || o.MaxQueue < 0 {
		return o, errors.New("durations and MaxQueue must be >= 0")
	}
	if o.Alpha < 0 || o.Alpha >= 1 || o.Alpha != o.Alpha {
		return o, fmt.Errorf("Alpha must be in [0, 1), got %v", o.Alpha)
	}
	if o.Cycle == 0 {
		o.Cycle = 10 * time.Millisecond
	}
	if o.Burst == 0 {
		o.Burst = 100 * time.Millisecond
	}
	o.Burst = max(o.Burst, o.Cycle)
	if o.Debt == 0 {
		o.Debt = time.Second
	}
	if o.Alpha == 0 {
		o.Alpha = 0.7
	}
	if o.AccountingCycle == 0 {
		o.AccountingCycle = 100 * time.Millisecond
	}
	if o.MaxQueue == 0 {
		o.MaxQueue = 256
	}
	if o.Initial.IsZero() {
		o.Initial = Vector(u)
	}
	return o, nil
}

// prepare validates what every scheduler constructor takes.
func prepare(kind string, cfg Config, opt Options) (Unit, Options, error) {
	if err := cfg.Validate(); err != nil {
		return Unit{}, opt, fmt.Errorf("gage: %s scheduler: %w", kind, err)
	}
	u := cfg.UnitOrDefault()
	opt, err := opt.withDefaults(u)
	if err != nil {
		return u, opt, fmt.Errorf("gage: %s scheduler: options: %w", kind, err)
	}
	return u, opt, nil
}

// predictor is §3.4's per-subscriber cost prediction: reports within one
// accounting cycle are averaged into P_k, then M_k = α·M_{k-1} + (1-α)·P_k.
// The first cycle's average seeds M directly, so a wrong Initial is
// forgotten at the first report rather than decaying slowly.
type predictor struct {
	alpha  float64
	period time.Duration
	m      Vector
	seeded bool
	sum    Vector // usage reported in the current accounting cycle
	n      int
	since  time.Time
	open   bool // whether since is the start of a cycle
}

func (p *predictor) predict() Vector { return p.m }

// A report of nothing used at all is not a sample: it is how a shell
// refunds requests that were dropped at their turn (their client gave up)
// or failed before reaching a node, and averaging those zeros in would
// make a subscriber whose requests are often abandoned, a flooding one,
// look cheap: charged too little at dispatch and its demand undercounted.
func (p *predictor) observe(now time.Time, used Vector, n int) {
	if n <= 0 || used.IsZero() {
		return
	}
	if !p.open {
		p.since, p.open = now, true
	}
	p.sum, p.n = p.sum.Add(used), p.n+n
	if now.Sub(p.since) < p.period && p.seeded {
		return
	}
	avg := p.sum.Scale(1 / float64(p.n))
	if p.seeded {
		p.m = p.m.Scale(p.alpha).Add(avg.Scale(1 - p.alpha))
	} else {
		p.m, p.seeded = avg, true
	}
	p.sum, p.n, p.since = Vector{}, 0, now
}

// inflight is the predicted usage charged for requests dispatched and not
// yet reported: the paper's "estimated resource usage" (§3.5). A report for
// k requests refunds k average charges before the actual usage is charged.
type inflight struct {
	sum Vector
	n   int
}

func (f *inflight) add(v Vector) { f.sum, f.n = f.sum.Add(v), f.n+1 }

// release removes k requests' charges and returns them. Reports for more
// requests than are outstanding (a gateway restart, a report for another
// gateway's request) release what there is.
func (f *inflight) release(k int) Vector {
	k = min(k, f.n)
	if k <= 0 {
		return Vector{}
	}
	out := f.sum.Scale(float64(k) / float64(f.n))
	f.sum, f.n = f.sum.Sub(out), f.n-k
	if f.n == 0 {
		f.sum = Vector{}
	}
	return out
}

// ring is a FIFO of requests.
type ring struct {
	buf        []Request
	head, size int
}

func (r *ring) len() int { return r.size }

func (r *ring) push(x Request) {
	if r.size == len(r.buf) {
		nb := make([]Request, max(8, 2*len(r.buf)))
		for i := range r.size {
			nb[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.size)%len(r.buf)] = x
	r.size++
}

func (r *ring) peek() Request { return r.buf[r.head] }

// remove takes the request with id out, keeping the others' order, and
// reports whether it was there. Linear: queues are bounded (MaxQueue) and
// cancellations rarer than dispatches.
func (r *ring) remove(id uint64) bool {
	for i := range r.size {
		if r.buf[(r.head+i)%len(r.buf)].ID != id {
			continue
		}
		for j := i; j < r.size-1; j++ {
			r.buf[(r.head+j)%len(r.buf)] = r.buf[(r.head+j+1)%len(r.buf)]
		}
		r.buf[(r.head+r.size-1)%len(r.buf)] = Request{}
		r.size--
		return true
	}
	return false
}

func (r *ring) pop() Request {
	x := r.buf[r.head]
	r.buf[r.head] = Request{}
	r.head = (r.head + 1) % len(r.buf)
	r.size--
	return x
}

func seconds(d time.Duration) float64 { return d.Seconds() }

func checkFraction(f float64) error {
	if f < 0 || f > 1 || f != f {
		return fmt.Errorf("gage: share fraction must be in [0, 1], got %v", f)
	}
	return nil
}
