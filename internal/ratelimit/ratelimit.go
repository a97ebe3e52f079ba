// Package ratelimit limits how often each peer address may be served: a
// token bucket (golang.org/x/time/rate) per address, with idle addresses
// forgotten. Time is passed in, so callers drive it from their clock.
package ratelimit

import (
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// MaxPeers bounds how many addresses a PerPeer tracks. Beyond it (a flood
// from spoofed source addresses), new addresses are admitted untracked:
// the limit protects against a peer that repeats itself, and whatever
// comes after it (authentication) still stands.
const MaxPeers = 1 << 16

// PerPeer is a rate limit per peer address. It is safe for concurrent use.
type PerPeer struct {
	limit rate.Limit
	burst int
	idle  time.Duration

	mu    sync.Mutex
	peers map[netip.Addr]*peer
	swept time.Time
}

type peer struct {
	lim  *rate.Limiter
	last time.Time
}

// New allows each address perSecond events on average and burst at once.
func New(perSecond float64, burst int) *PerPeer {
	if burst < 1 {
		burst = 1
	}
	// An address idle long enough to refill its bucket is no different
	// from a new one, so it can be forgotten.
	idle := time.Minute
	if perSecond > 0 {
		if refill := time.Duration(float64(burst) / perSecond * float64(time.Second)); refill > idle {
			idle = refill
		}
	}
	return &PerPeer{limit: rate.Limit(perSecond), burst: burst, idle: idle, peers: map[netip.Addr]*peer{}}
}

// Allow reports whether addr may be served at now, and counts it.
func (l *PerPeer) Allow(addr netip.Addr, now time.Time) bool {
	addr = addr.Unmap()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) > l.idle || len(l.peers) >= MaxPeers {
		l.sweep(now)
	}
	p, ok := l.peers[addr]
	if !ok {
		if len(l.peers) >= MaxPeers {
			return true
		}
		p = &peer{lim: rate.NewLimiter(l.limit, l.burst)}
		l.peers[addr] = p
	}
	p.last = now
	return p.lim.AllowN(now, 1)
}

func (l *PerPeer) sweep(now time.Time) {
	l.swept = now
	for a, p := range l.peers {
		if now.Sub(p.last) > l.idle {
			delete(l.peers, a)
		}
	}
}

// Len is how many addresses are tracked.
func (l *PerPeer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.peers)
}
