package gage

import (
	"fmt"
	"math"
	"time"
)

// Shaper paces each subscriber's response bytes on the outgoing link: the
// bytes of its responses leave at a little above the rate the subscriber is
// served, instead of all at once when a response is ready.
//
// Why. The schedulers dispatch whole requests, so a subscriber's network
// usage lands in lumps: one 100 KB response is 50 GRU, half a second of a
// 100 GRPS reservation, sent in 8 ms of a 100 Mbit/s link. Over 1 s windows
// no whole-request scheduler can then hold a reservation to 5% on a
// web-like mix (docs/experiments/gage.md, Fig 6), however well it predicts
// costs. The paper entitles a subscriber to "100 KBytes of network
// bandwidth on the outgoing link within every second" (§3.1); pacing the
// bytes at that rate is what makes the entitlement hold over short windows.
// It costs latency on large responses (a 100 KB response of a 100 GRPS
// subscriber takes about 0.4 s), so the gateway does it only when asked.
//
// How. A subscriber's pace is Headroom times the larger of its
// reservation's network rate and the rate its responses' bytes have been
// arriving (a Meter over Response), so a subscriber served spare capacity
// is paced at its actual rate and no backlog builds; Headroom > 1 lets a
// backlog drain. The rate counts whole responses as they arrive, not
// chunks as they leave: chunks leave at the pace, and counting them would
// raise the pace on itself. Chunks
// are spaced on a virtual clock (the generic cell rate algorithm): a chunk
// may go at the later of now and the end of the subscriber's previous
// chunk at the pace, and a response goes faster than the pace where it
// would otherwise end more than MaxDelay after it was ready.
// Subscribers without a reservation are not paced: nothing is promised to
// them that smoothing would keep.
type Shaper struct {
	opts ShaperOptions
	subs map[string]*shaped
}

// ShaperOptions tune a Shaper; zero fields take the defaults.
type ShaperOptions struct {
	// Headroom is the pace over the subscriber's rate (default 1.25).
	Headroom float64
	// MaxDelay bounds how much later than at once a response ends
	// (default 1 s): a response too large for its subscriber's pace, or
	// behind a burst of them, goes faster so as to end by then.
	MaxDelay time.Duration
	// Tau is the time constant of the observed rate (default 1 s).
	Tau time.Duration
	// Chunk is how many bytes go out at a time (default 16 KiB): small
	// enough that a 100 GRPS subscriber's response (250 KB/s paced)
	// leaves in steps of 65 ms, large enough that a write per chunk costs
	// nothing.
	Chunk int
}

// Shaper defaults.
const (
	DefaultShapeHeadroom = 1.25
	DefaultShapeMaxDelay = time.Second
	DefaultShapeChunk    = 16 << 10
)

type shaped struct {
	reserved float64 // bytes per second: the whole reservation's network
	share    float64 // this gateway's part of the reservation
	seen     Meter
	next     time.Time // when the previous chunk ends at the pace
}

func (sh *shaped) floor() float64 { return sh.reserved * sh.share }

// NewShaper builds a shaper for cfg's subscribers. The unit must schedule
// the network (Unit[Net] > 0): without it there is no byte rate to pace to.
func NewShaper(cfg Config, o ShaperOptions) (*Shaper, error) {
	if o.Headroom == 0 {
		o.Headroom = DefaultShapeHeadroom
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = DefaultShapeMaxDelay
	}
	if o.Tau == 0 {
		o.Tau = time.Second
	}
	if o.Chunk == 0 {
		o.Chunk = DefaultShapeChunk
	}
	switch {
	case o.Headroom < 1 || o.Headroom != o.Headroom:
		return nil, fmt.Errorf("gage: shaper headroom must be >= 1, got %v", o.Headroom)
	case o.MaxDelay < 0:
		return nil, fmt.Errorf("gage: shaper max delay must be >= 0, got %v", o.MaxDelay)
	case o.Tau < 0:
		return nil, fmt.Errorf("gage: shaper time constant must be >= 0, got %v", o.Tau)
	case o.Chunk < 0:
		return nil, fmt.Errorf("gage: shaper chunk must be >= 0 bytes, got %d", o.Chunk)
	}
	unit := cfg.UnitOrDefault()
	if unit[Net] <= 0 {
		return nil, fmt.Errorf("gage: pacing responses needs a unit with network bytes (unit.net > 0)")
	}
	s := &Shaper{opts: o, subs: map[string]*shaped{}}
	for _, sub := range cfg.Subscribers {
		if sub.Reservation > 0 {
			s.subs[sub.Name] = &shaped{reserved: sub.Reservation * unit[Net], share: 1, seen: Meter{Tau: o.Tau}}
		}
	}
	return s, nil
}

// SetShare sets this gateway's part (0..1) of sub's reservation, as the
// gateways split it (Splitter): the pace's floor is that part of the
// reservation's network rate, so that a gateway carrying a tenth of a
// subscriber's traffic paces it at a tenth. Unknown and unreserved
// subscribers, and fractions out of range, are ignored.
func (s *Shaper) SetShare(sub string, fraction float64) {
	if sh := s.subs[sub]; sh != nil && fraction >= 0 && fraction <= 1 {
		sh.share = fraction
	}
}

// Response registers a response of n bytes for sub, ready at now, and
// returns it for its chunks to be cut and timed by Next.
func (s *Shaper) Response(now time.Time, sub string, n int) *Paced {
	sh := s.subs[sub]
	if sh != nil {
		sh.seen.Add(now, float64(n))
	}
	return &Paced{shaper: s, sub: sh, left: n, by: now.Add(s.opts.MaxDelay)}
}

// Paced is one response on its way out through a Shaper.
type Paced struct {
	shaper *Shaper
	sub    *shaped // nil: not paced
	left   int     // bytes not yet cut into chunks
	by     time.Time
}

// Next returns the response's next chunk, offered at now: when it may go
// out and how many bytes it is (0: the response is all out). An unpaced
// subscriber's response goes whole, at once; a paced one's in chunks, at
// once for a subscriber idle for a while, later for one sending faster
// than its pace, and never so late that the response would end more than
// MaxDelay after it was ready. The caller sends the chunk then and asks
// for the next one after that, so a response's chunks keep their order
// and a subscriber's concurrent responses share its pace.
func (p *Paced) Next(now time.Time) (due time.Time, n int) {
	sh := p.sub
	if sh == nil || p.left <= 0 {
		n, p.left = p.left, 0
		return now, n
	}
	n = min(p.left, p.shaper.opts.Chunk)
	pace := p.shaper.opts.Headroom * max(sh.floor(), sh.seen.Rate(now))
	if rest := p.by.Sub(now).Seconds(); rest > 0 {
		pace = max(pace, float64(p.left)/rest) // what ends the response by its bound
	} else {
		pace = math.Inf(1)
	}
	p.left -= n
	due = sh.next
	if due.After(p.by) { // behind other responses past this one's bound
		due = p.by
	}
	if due.Before(now) || math.IsInf(pace, 1) {
		due = now
	}
	sh.next = due.Add(time.Duration(float64(n) / pace * float64(time.Second)))
	return due, n
}
