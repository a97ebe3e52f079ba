package gage

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// GatewayDemand is what a gateway gossips: the demand it observes per
// subscriber, in GRPS, stamped with its own clock.
type GatewayDemand struct {
	Gateway string
	// At orders one gateway's messages: a message replaces the one held
	// for its gateway only if At is later. At is compared only with At's
	// of the same gateway, never with the receiver's clock, so clock skew
	// between gateways does not matter.
	At     time.Time
	Demand map[string]float64
}

// SplitOptions tune a Splitter.
type SplitOptions struct {
	// TTL is how long a peer's demand counts after the receiver took its
	// newest message (default 1 s). It sets the bound on giving a dead
	// gateway's share back: its last message left before it died, so the
	// survivors stop counting it at most TTL plus one message delay after
	// the death, and split the whole reservation among themselves from the
	// next Apply (a shell applies at least every gossip period, so the
	// bound to state is TTL + gossip period). Keep TTL several gossip
	// periods long, or a slow gossip round makes a live peer look dead.
	TTL time.Duration
	// Floor is the part of each reservation split evenly among the live
	// gateways whatever their demand (default 0.05), so a gateway that sees
	// a subscriber's first request in a while can serve it from
	// reservation before its demand has been gossiped.
	Floor float64
}

// Splitter divides each subscriber's reservation (and limit), and the
// cluster's capacity, among the gateways that are running, in proportion to
// the demand each sees. It holds this gateway's view of everyone's demand:
// Local records its own, Merge takes a peer's gossip, and Fraction and
// Capacity read this gateway's share.
//
// Why gossip of demand rather than leases. A lease scheme (Doorman; the
// token buckets CockroachDB keeps per tenant) has a server hand out shares
// and gateways renew them: exact, but the server is a coordinator on the
// path of every renewal, and when it is slow or partitioned the gateways
// run on expiring leases and must fall back to something. Issue 12 rules
// out a coordinator that can stall admission. With gossip each gateway
// decides alone from what it last heard: admission never waits on another
// machine, a dead gateway is simply no longer heard from (its share comes
// back after TTL, see SplitOptions), and Neptune already runs a gossip
// membership the demand can ride on. The price is that the views differ
// for a gossip delay after demand moves, so the shares of one subscriber
// may add up to a little more or less than its reservation for that long;
// the averaging windows the guarantee is stated over (seconds, §4.2.3) are
// much longer than a gossip round.
//
// The split, for a subscriber with reservation R, demand d_g at gateway g
// (D in total, N gateways alive), and floor f:
//
//	fraction_g = f/N + (1-f)·(d_g + max(R-D, 0)/N) / max(D, R)
//
// Under-subscribed (D < R), each gateway gets its demand plus an even part
// of the slack; over-subscribed, each gets a part proportional to its
// demand. The fractions add up to 1, so the subscriber gets R in total.
// The capacity is split the same way on the reservations and by excess
// demand on the spare (see Capacity).
type Splitter struct {
	self  string
	opt   SplitOptions
	unit  Unit
	res   map[string]float64
	names []string
	peers map[string]*peerDemand
}

type peerDemand struct {
	msg  GatewayDemand
	seen time.Time // receiver's clock when msg arrived
}

// NewSplitter returns the splitter of gateway self for cfg's subscribers.
func NewSplitter(self string, cfg Config, opt SplitOptions) (*Splitter, error) {
	if self == "" {
		return nil, errors.New("gage: splitter: empty gateway name")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gage: splitter: %w", err)
	}
	if opt.TTL < 0 || opt.Floor < 0 || opt.Floor > 1 || opt.Floor != opt.Floor {
		return nil, fmt.Errorf("gage: splitter: TTL must be >= 0 and Floor in [0, 1], got %v and %v", opt.TTL, opt.Floor)
	}
	if opt.TTL == 0 {
		opt.TTL = time.Second
	}
	if opt.Floor == 0 {
		opt.Floor = 0.05
	}
	s := &Splitter{self: self, opt: opt, unit: cfg.UnitOrDefault(), res: map[string]float64{}, peers: map[string]*peerDemand{}}
	for _, sub := range cfg.All() {
		s.res[sub.Name] = sub.Reservation
		s.names = append(s.names, sub.Name)
	}
	s.peers[self] = &peerDemand{msg: GatewayDemand{Gateway: self}}
	return s, nil
}

// Local records this gateway's demand and returns the message to gossip.
func (s *Splitter) Local(now time.Time, demand map[string]float64) GatewayDemand {
	m := GatewayDemand{Gateway: s.self, At: now, Demand: maps.Clone(demand)}
	s.peers[s.self] = &peerDemand{msg: m, seen: now}
	return m
}

// Merge takes a peer's message, received at now; it reports whether the
// message was news, which a gossip layer uses to decide whether to pass it
// on. Messages about this gateway are ignored: it knows its own demand.
func (s *Splitter) Merge(now time.Time, m GatewayDemand) bool {
	if m.Gateway == "" || m.Gateway == s.self {
		return false
	}
	if p, ok := s.peers[m.Gateway]; ok && !m.At.After(p.msg.At) {
		return false
	}
	m.Demand = maps.Clone(m.Demand)
	s.peers[m.Gateway] = &peerDemand{msg: m, seen: now}
	return true
}

// Known returns the newest message held from every gateway, itself
// included, for a gossip layer's anti-entropy exchange.
func (s *Splitter) Known() []GatewayDemand {
	out := make([]GatewayDemand, 0, len(s.peers))
	for _, g := range slices.Sorted(maps.Keys(s.peers)) {
		out = append(out, s.peers[g].msg)
	}
	return out
}

// Live returns the gateways whose demand counts at now, sorted; this
// gateway is always one.
func (s *Splitter) Live(now time.Time) []string {
	var out []string
	for g, p := range s.peers {
		if g == s.self || now.Sub(p.seen) <= s.opt.TTL {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out
}

// fraction is gateway g's part of subscriber sub's reservation among live.
func (s *Splitter) fraction(live []string, g, sub string) float64 {
	n := float64(len(live))
	if n <= 1 {
		return 1
	}
	d, total := 0.0, 0.0
	for _, h := range live {
		x := max(s.peers[h].msg.Demand[sub], 0)
		total += x
		if h == g {
			d = x
		}
	}
	r := s.res[sub]
	if total == 0 && r == 0 {
		return 1 / n
	}
	f := s.opt.Floor
	return f/n + (1-f)*(d+max(r-total, 0)/n)/max(total, r)
}

// Fraction is this gateway's part (0..1) of subscriber sub's reservation
// and limit at now.
func (s *Splitter) Fraction(now time.Time, sub string) float64 {
	return s.fraction(s.Live(now), s.self, sub)
}

// CapacityFraction is this gateway's part (0..1) at now of a cluster
// capacity of grps GRPS: the reservation parts it enforces, plus a part of
// the spare (capacity less all reservations) proportional to the demand it
// sees beyond its reservation parts. Splitting capacity by raw demand
// instead would let a flood at one gateway starve the reservations held
// at the others.
func (s *Splitter) CapacityFraction(now time.Time, grps float64) float64 {
	live := s.Live(now)
	if len(live) <= 1 || grps <= 0 {
		return 1
	}
	reserved, mine := 0.0, 0.0
	excess := map[string]float64{}
	sumExcess := 0.0
	for _, sub := range s.names {
		r := s.res[sub]
		reserved += r
		for _, g := range live {
			part := r * s.fraction(live, g, sub)
			if g == s.self {
				mine += part
			}
			e := max(s.peers[g].msg.Demand[sub]-part, 0)
			excess[g] += e
			sumExcess += e
		}
	}
	// Overbooked (capacity below the reservations): the reservation parts
	// shrink together.
	if reserved > grps {
		return mine / reserved
	}
	spare := grps - reserved
	if sumExcess > 0 {
		mine += spare * excess[s.self] / sumExcess
	} else {
		mine += spare / float64(len(live))
	}
	return mine / grps
}

// Apply sets sched's share of every subscriber and its part of the
// cluster's capacity (resources per second) from this gateway's view at
// now.
func (s *Splitter) Apply(now time.Time, sched Scheduler, capacity Vector) error {
	live := s.Live(now)
	var errs []error
	for _, sub := range s.names {
		if err := sched.SetShare(now, sub, s.fraction(live, s.self, sub)); err != nil {
			errs = append(errs, err)
		}
	}
	sched.SetCapacity(now, capacity.Scale(s.CapacityFraction(now, s.unit.GRPS(capacity))))
	return errors.Join(errs...)
}
