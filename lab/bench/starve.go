package bench

import (
	"fmt"
	"sync"
	"time"
)

// StarvedLag is the mean lateness above which a measuring process did not
// get the CPU in time (other work on the machine): its figures then
// measure the machine, not the contender, and a goal judged on them is
// INCONCLUSIVE (report.Check), never PASS. Unloaded, a goroutine's timer
// wakes it within ~0.1 ms.
const StarvedLag = 2 * time.Millisecond

// Starved is the doubt to add to a check when lag (a mean lateness, see
// LagProbe) exceeds StarvedLag: its condition and its reason.
func Starved(what string, lag time.Duration) (bool, string) {
	return lag > StarvedLag, fmt.Sprintf("%s CPU-starved (mean wake-up lateness %.2f ms > %v): rerun on a quieter machine", what, float64(lag)/float64(time.Millisecond), StarvedLag)
}

// LagProbe measures how late this process's goroutines wake up: a
// goroutine sleeps period at a time and records how much longer each
// sleep took. It is the starvation flag of benchmarks whose calls have no
// schedule of their own to be late against (closed loops, the failover
// timeline); open-loop benchmarks measure each arrival's lateness instead.
type LagProbe struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	sum  time.Duration
	n    int
}

// StartLagProbe starts a probe that wakes every period.
func StartLagProbe(period time.Duration) *LagProbe {
	p := &LagProbe{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTimer(period)
		defer t.Stop()
		for {
			want := time.Now().Add(period)
			t.Reset(period)
			select {
			case <-p.stop:
				return
			case <-t.C:
				late := max(time.Since(want), 0)
				p.mu.Lock()
				p.sum += late
				p.n++
				p.mu.Unlock()
			}
		}
	}()
	return p
}

// Mean is the mean lateness so far.
func (p *LagProbe) Mean() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		return 0
	}
	return p.sum / time.Duration(p.n)
}

// Stop ends the probe and returns its mean lateness.
func (p *LagProbe) Stop() time.Duration {
	close(p.stop)
	<-p.done
	return p.Mean()
}
