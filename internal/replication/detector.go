package replication

import (
	"sync"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
)

// detector is the fast failure detector. Memberlist takes seconds to
// declare a node dead; here a peer is dead once suspectAfter calls to it in
// a row are refused (a killed process refuses connections; calls that
// time out are not counted: see sender), and a primary is dead once
// silent for its replica's SilenceLimit (AckTimeout on a steady link; it
// heartbeats every Heartbeat). Hearing from a peer clears the suspicion.
// Safe for concurrent use.
type detector struct {
	clock clock.Clock

	mu      sync.Mutex
	suspect map[string]time.Time
	heard   map[string]time.Time
	// failed counts a peer's calls that failed in a row.
	failed map[string]int
}

func newDetector(clk clock.Clock) detector {
	return detector{clock: clk, suspect: map[string]time.Time{}, heard: map[string]time.Time{}, failed: map[string]int{}}
}

// alive reports whether node counts as alive at now: not suspected, and
// announced in the yellow pages or heard from lately. A primary silent
// for ackTimeout (the replica's SilenceLimit) becomes suspect here.
func (d *detector) alive(node string, now time.Time, announced, isPrimary bool, ackTimeout time.Duration) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	heard, s := d.heard[node], d.suspect[node]
	if isPrimary && !heard.IsZero() && now.Sub(heard) > ackTimeout && s.Before(heard) {
		d.suspect[node], s = now, now
	}
	if s.After(heard) && now.Sub(s) < suspectFor {
		return false
	}
	return announced || now.Sub(heard) < suspectFor
}

// heardFrom records a call from node, or one to it that succeeded.
func (d *detector) heardFrom(node string) {
	d.mu.Lock()
	d.heard[node] = d.clock.Now()
	d.failed[node] = 0
	d.mu.Unlock()
}

// unreachable makes node suspect now.
func (d *detector) unreachable(node string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failed[node] = max(d.failed[node], suspectAfter)
	d.suspect[node] = d.clock.Now()
}

// callFailed records a failed call to node; suspectAfter in a row make it
// suspect.
func (d *detector) callFailed(node string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failed[node]++; d.failed[node] >= suspectAfter {
		d.suspect[node] = d.clock.Now()
	}
}

// heardWithin reports whether node was heard from less than d before now.
func (d *detector) heardWithin(node string, now time.Time, d2 time.Duration) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.heard[node]
	return ok && now.Sub(h) < d2
}
