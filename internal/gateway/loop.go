package gateway

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/gage"
)

// Errors of waiting for a turn.
var (
	// errOverShare: the request waited its whole wait bound without its
	// turn coming, so its subscriber is over its share and there is no
	// spare. Answered 429, as ErrQueueFull is.
	errOverShare = errors.New("gateway: no turn within the wait bound")
	// errStopped: the scheduler loop has stopped (the gateway is shutting
	// down past its drain bound). Answered 503.
	errStopped = errors.New("gateway: scheduler stopped")
)

// loop runs the gateway's one gage.Scheduler. The scheduler is a pure
// state machine and not safe for concurrent use, so one goroutine owns it
// and everything reaches it as a message: arrivals (which need an answer,
// queued or refused), usage reports and snapshots. After each message the
// loop dispatches every request Next lets go, then sleeps on the clock
// until the scheduler's Wake or the next message. Time is read from the
// injected clock only, so a test drives the loop with a manual clock.
type loop struct {
	clk      clock.Clock
	sched    gage.Scheduler
	metrics  *metrics
	arrivals chan arrival
	usage    chan gage.Usage
	cancels  chan *ticket
	snaps    chan chan []gage.QueueState
	stopped  chan struct{} // closed when run returns
	// cl is the cluster view (capacity, peers' demand), ticked every
	// period; loads and gossip feed it.
	cl     *cluster
	period time.Duration
	loads  chan nodeLoad
	gossip chan gage.GatewayDemand
	// acct, if > 0, is the accounting cycle: usage is held in held and
	// reported once a cycle (Config.AccountingCycle).
	acct time.Duration

	// Owned by the run goroutine.
	nextID  uint64
	waiting map[uint64]*ticket
	held    map[string]gage.Usage
}

// ticket is one request's place in the scheduler. Whoever moves its state
// out of waiting first decides its fate: the loop granting the turn, or
// the handler giving up (wait bound, deadline, client gone). So a request
// is never both served and refused, with no lock between the two.
type ticket struct {
	sub   string
	id    uint64 // set by the loop before it answers the arrival
	state atomic.Int32
	turn  chan struct{} // closed when granted
}

const (
	waiting int32 = iota
	granted
	abandoned
)

func (t *ticket) grant() bool   { return t.state.CompareAndSwap(waiting, granted) }
func (t *ticket) abandon() bool { return t.state.CompareAndSwap(waiting, abandoned) }

type arrival struct {
	t     *ticket
	reply chan error
}

func newLoop(clk clock.Clock, s gage.Scheduler, m *metrics, cl *cluster, period, acct time.Duration) *loop {
	return &loop{
		clk: clk, sched: s, metrics: m, cl: cl, period: period, acct: acct, held: map[string]gage.Usage{},
		loads:    make(chan nodeLoad, 256),
		gossip:   make(chan gage.GatewayDemand, 64),
		arrivals: make(chan arrival),
		usage:    make(chan gage.Usage, 4096),
		cancels:  make(chan *ticket, 4096),
		snaps:    make(chan chan []gage.QueueState),
		stopped:  make(chan struct{}),
		waiting:  map[uint64]*ticket{},
	}
}

// minSleep keeps a scheduler that asks to be woken at once (or in the
// past) from spinning the loop.
const minSleep = 100 * time.Microsecond

// run is the loop; it returns when ctx ends. Requests still waiting then
// are refused by their handlers (errStopped).
func (l *loop) run(ctx context.Context) {
	defer close(l.stopped)
	timer := l.clk.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	tick := l.clk.NewTicker(l.period)
	defer tick.Stop()
	var acct <-chan time.Time
	if l.acct > 0 {
		t := l.clk.NewTicker(l.acct)
		defer t.Stop()
		acct = t.Chan()
	}
	for {
		now := l.clk.Now()
		l.dispatch(now)
		var wake <-chan time.Time
		if at, ok := l.sched.Wake(now); ok {
			timer.Reset(max(at.Sub(now), minSleep))
			wake = timer.Chan()
		}
		select {
		case a := <-l.arrivals:
			l.arrive(l.clk.Now(), a)
		case u := <-l.usage:
			l.used(l.clk.Now(), u)
		case <-acct:
			l.flush(l.clk.Now())
		case t := <-l.cancels:
			l.cancel(l.clk.Now(), t)
		case s := <-l.snaps:
			// Dispatch at the current time first, so a snapshot shows
			// every decision due by now (tests on a manual clock step
			// time and then read the state).
			l.dispatch(l.clk.Now())
			s <- l.sched.Queues()
		case ld := <-l.loads:
			l.cl.observe(l.clk.Now(), ld)
		case m := <-l.gossip:
			l.cl.merge(l.clk.Now(), m)
		case <-tick.Chan():
			l.cl.tick(l.clk.Now(), l.sched)
			l.metrics.onTick(l.cl.status.Load())
		case <-wake:
		case <-ctx.Done():
			return
		}
		timer.Stop()
	}
}

func (l *loop) arrive(now time.Time, a arrival) {
	id := l.nextID
	l.nextID++
	l.cl.arrived(now, a.t.sub)
	if err := l.sched.Enqueue(now, gage.Request{ID: id, Subscriber: a.t.sub, Arrived: now}); err != nil {
		a.reply <- err
		return
	}
	a.t.id = id
	l.waiting[id] = a.t
	l.metrics.onQueued(a.t.sub, 1)
	a.reply <- nil
}

// cancel takes a request whose handler gave up out of the scheduler, so
// it is not dispatched: dispatched and refunded instead, it would still
// count as served in the schedulers' shares of the spare (Credit's
// running count, Tag's tags), and a subscriber whose requests time out
// in the queue would lose its share of the spare to the others.
func (l *loop) cancel(now time.Time, t *ticket) {
	if l.waiting[t.id] != t {
		return // dispatched meanwhile: dispatch drops it at no charge
	}
	delete(l.waiting, t.id)
	l.sched.Cancel(now, gage.Request{ID: t.id, Subscriber: t.sub})
}

// dispatch grants every request the scheduler lets go now. A request
// whose handler gave up before the loop could cancel it is reported at
// once as having used nothing, which refunds the prediction it was
// charged and drains the scheduler's count of outstanding requests.
func (l *loop) dispatch(now time.Time) {
	for {
		r, ok := l.sched.Next(now)
		if !ok {
			return
		}
		t := l.waiting[r.ID]
		delete(l.waiting, r.ID)
		if t == nil {
			continue // cannot happen: every queued ID is waiting
		}
		if t.grant() {
			l.metrics.onQueued(t.sub, -1)
			l.metrics.onServed(t.sub)
			close(t.turn)
			continue
		}
		// The handler gave up (and took it off the queue-length gauge).
		l.report(now, gage.Usage{Subscriber: t.sub, Requests: 1})
	}
}

// used takes what an answered request used: to the scheduler at once, or
// held for the end of the accounting cycle.
func (l *loop) used(now time.Time, u gage.Usage) {
	if l.acct <= 0 {
		l.report(now, u)
		return
	}
	h := l.held[u.Subscriber]
	h.Subscriber, h.Requests, h.Used = u.Subscriber, h.Requests+u.Requests, h.Used.Add(u.Used)
	l.held[u.Subscriber] = h
}

// flush ends an accounting cycle: each subscriber's held usage, summed,
// goes to the scheduler as one report.
func (l *loop) flush(now time.Time) {
	for _, sub := range slices.Sorted(maps.Keys(l.held)) {
		l.report(now, l.held[sub])
	}
	clear(l.held)
}

func (l *loop) report(now time.Time, u gage.Usage) {
	// Only subscribers of the config are ever enqueued, so the scheduler
	// knows every name reported.
	_ = l.sched.Report(now, u)
}

// wait queues a request of sub and waits for its turn, at most maxWait
// (then errOverShare) and while ctx lasts (then ctx's error). A full queue
// is gage.ErrQueueFull at once. On success the caller owns the turn and
// must report the request's usage with done, whatever becomes of it.
func (l *loop) wait(ctx context.Context, sub string, maxWait time.Duration) error {
	t := &ticket{sub: sub, turn: make(chan struct{})}
	// The bound starts before the arrival reaches the loop, so once the
	// loop has queued the request its bound is running (tests on a
	// manual clock rely on it).
	bound := l.clk.NewTimer(maxWait)
	defer bound.Stop()
	reply := make(chan error, 1)
	select {
	case l.arrivals <- arrival{t: t, reply: reply}:
	case <-ctx.Done():
		return ctx.Err()
	case <-l.stopped:
		return errStopped
	}
	if err := <-reply; err != nil {
		return err
	}
	var err error
	select {
	case <-t.turn:
		return nil
	case <-bound.Chan():
		err = errOverShare
	case <-ctx.Done():
		err = ctx.Err()
	case <-l.stopped:
		err = errStopped
	}
	if !t.abandon() {
		return nil // granted meanwhile: the turn is ours after all
	}
	// The loop takes it out of the scheduler; if the channel is full, it
	// keeps its place until its turn, when the loop drops it at no
	// charge. The gauge counts only requests still waiting.
	l.metrics.onQueued(sub, -1)
	select {
	case l.cancels <- t:
	default:
	}
	return err
}

// done reports what a request that had its turn used. It never blocks
// for long: the channel is deep, and a stopped loop takes nothing.
func (l *loop) done(u gage.Usage) {
	select {
	case l.usage <- u:
	case <-l.stopped:
	}
}

// queues returns the scheduler's view of each queue once every dispatch
// due by now is made, or nil if the loop has stopped.
func (l *loop) queues(ctx context.Context) []gage.QueueState {
	c := make(chan []gage.QueueState, 1)
	select {
	case l.snaps <- c:
		return <-c
	case <-ctx.Done():
	case <-l.stopped:
	}
	return nil
}

// load hands a node's accounting cycle to the loop; it never blocks (a
// cycle comes again with the next answer).
func (l *loop) load(ld nodeLoad) {
	select {
	case l.loads <- ld:
	default:
	}
}

// merge hands a peer's gossip to the loop, dropping it if the loop is
// behind (the peer sends again next period).
func (l *loop) merge(m gage.GatewayDemand) {
	select {
	case l.gossip <- m:
	default:
	}
}
