package gage

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// load is one subscriber's traffic in a harness run.
type load struct {
	rate float64 // requests per second, arriving evenly
	use  Vector  // actual usage of each request
	// useAt, if set, gives the actual usage of the i-th request instead.
	useAt func(i int) Vector
	// useNow, if set, gives the actual usage of a request dispatched at
	// now since t0 instead.
	useNow func(d time.Duration) Vector
}

// harness drives a Scheduler on virtual time in 1 ms steps: arrivals at
// each subscriber's rate, every dispatch completes at once with its actual
// usage, and usage is reported every acct. The capacity is enforced by the
// scheduler alone, so what is measured is the scheduler's own decisions.
type harness struct {
	t      *testing.T
	s      Scheduler
	unit   Unit
	now    time.Time
	loads  map[string]load
	acct   time.Duration
	report bool // whether usage is reported (false breaks correction)
	// giveUp, if set, is how long a client waits: a request still queued
	// that long is cancelled (Scheduler.Cancel), as the gateway does when
	// a request's wait bound passes.
	giveUp  time.Duration
	queued  map[string][]Request
	granted map[uint64]bool

	acc     map[string]float64 // fractional arrivals carried over
	n       map[string]int     // requests arrived
	pending map[string]Usage
	nextRep time.Time
	nextID  uint64

	// Measured from the start of the window on.
	from    time.Time
	served  map[string]Vector
	count   map[string]int
	arrived map[string]int
	dropped map[string]int
}

func newHarness(t *testing.T, s Scheduler, loads map[string]load) *harness {
	return &harness{
		t: t, s: s, unit: DefaultUnit, now: t0, loads: loads, acct: 100 * time.Millisecond, report: true,
		acc: map[string]float64{}, n: map[string]int{}, pending: map[string]Usage{}, nextRep: t0.Add(100 * time.Millisecond),
		served: map[string]Vector{}, count: map[string]int{}, arrived: map[string]int{}, dropped: map[string]int{},
		queued: map[string][]Request{}, granted: map[uint64]bool{},
	}
}

// giveUpOnOld cancels the requests that have waited giveUp, counting them
// as dropped.
func (h *harness) giveUpOnOld() {
	for name, rs := range h.queued {
		for len(rs) > 0 && h.now.Sub(rs[0].Arrived) >= h.giveUp {
			r := rs[0]
			rs = rs[1:]
			if h.granted[r.ID] {
				delete(h.granted, r.ID)
				continue
			}
			if !h.s.Cancel(h.now, r) {
				h.t.Fatalf("cancel of a waiting request %d of %s: not found", r.ID, name)
			}
			if !r.Arrived.Before(h.from) {
				h.dropped[name]++
			}
		}
		h.queued[name] = rs
	}
}

// run advances d; measurements count from measureFrom on.
func (h *harness) run(d time.Duration) {
	end := h.now.Add(d)
	for h.now.Before(end) {
		h.now = h.now.Add(time.Millisecond)
		for name, l := range h.loads {
			h.acc[name] += l.rate / 1000
			for h.acc[name] >= 1 {
				h.acc[name]--
				h.nextID++
				counted := !h.now.Before(h.from)
				if counted {
					h.arrived[name]++
				}
				r := Request{ID: h.nextID, Subscriber: name, Arrived: h.now}
				if err := h.s.Enqueue(h.now, r); err != nil {
					if counted {
						h.dropped[name]++
					}
				} else if h.giveUp > 0 {
					h.queued[name] = append(h.queued[name], r)
				}
			}
		}
		if h.giveUp > 0 {
			h.giveUpOnOld()
		}
		for {
			r, ok := h.s.Next(h.now)
			if !ok {
				break
			}
			if h.giveUp > 0 {
				h.granted[r.ID] = true
			}
			l := h.loads[r.Subscriber]
			u := l.use
			if l.useAt != nil {
				u = l.useAt(h.n[r.Subscriber])
			}
			if l.useNow != nil {
				u = l.useNow(h.now.Sub(t0))
			}
			h.n[r.Subscriber]++
			if !h.now.Before(h.from) {
				h.served[r.Subscriber] = h.served[r.Subscriber].Add(u)
				h.count[r.Subscriber]++
			}
			p := h.pending[r.Subscriber]
			p.Subscriber, p.Requests, p.Used = r.Subscriber, p.Requests+1, p.Used.Add(u)
			h.pending[r.Subscriber] = p
		}
		if !h.now.Before(h.nextRep) {
			h.nextRep = h.nextRep.Add(h.acct)
			for name, u := range h.pending {
				if h.report {
					if err := h.s.Report(h.now, u); err != nil {
						h.t.Fatal(err)
					}
				}
				delete(h.pending, name)
			}
		}
	}
}

// measure resets the counters: what follows is measured.
func (h *harness) measure() {
	h.from = h.now
	clear(h.served)
	clear(h.count)
	clear(h.arrived)
	clear(h.dropped)
}

// grps is what name was served since measure, in GRU per second on its
// bottleneck resource.
func (h *harness) grps(name string) float64 {
	return h.unit.Cost(h.served[name]) / h.now.Sub(h.from).Seconds()
}

func within(got, want, rel float64) bool { return math.Abs(got-want) <= rel*math.Abs(want) }

// schedulers are the contenders the behavioural tests run on.
var schedulers = map[string]func(Config, Options) (Scheduler, error){
	"credit": func(c Config, o Options) (Scheduler, error) { return NewCredit(c, o) },
	"tag":    func(c Config, o Options) (Scheduler, error) { return NewTag(c, o) },
}

func mustSched(t *testing.T, mk func(Config, Options) (Scheduler, error), cfg Config, grps float64) Scheduler {
	t.Helper()
	s, err := mk(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.SetCapacity(t0, DefaultUnit.Times(grps))
	return s
}

func subs(pairs ...any) Config {
	var c Config
	for i := 0; i < len(pairs); i += 2 {
		c.Subscribers = append(c.Subscribers, Subscriber{Name: pairs[i].(string), Reservation: pairs[i+1].(float64)})
	}
	return c
}

var gru = Vector(DefaultUnit)
