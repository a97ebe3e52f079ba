package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune/lab/report"
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
//
// It also reads the machine's CPU pressure (Linux PSI) at its start and
// stop: a sleeping probe wakes promptly even on a machine whose cores are
// all taken (the scheduler favours sleepers), so the lateness alone flags
// a process starved by its own load, the pressure one starved by others.
type LagProbe struct {
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	sum   time.Duration
	n     int
	psi0  time.Duration
	psiOK bool
	t0    time.Time
}

// StartLagProbe starts a probe that wakes every period.
func StartLagProbe(period time.Duration) *LagProbe {
	p := &LagProbe{stop: make(chan struct{}), done: make(chan struct{}), t0: time.Now()}
	p.psi0, p.psiOK = cpuStall()
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

// Stop ends the probe and returns what it saw.
func (p *LagProbe) Stop() Starvation {
	close(p.stop)
	<-p.done
	st := Starvation{Lag: p.Mean(), Pressure: -1}
	if stall, ok := cpuStall(); ok && p.psiOK {
		if el := time.Since(p.t0); el > 0 {
			st.Pressure = float64(stall-p.psi0) / float64(el)
		}
	}
	return st
}

// BusyMachine is the CPU pressure above which the machine counts as
// starved: some task waited for a CPU more than this fraction of the
// time. A benchmark's sequential cells (one caller, one server) add
// little; the rest is other work on the machine.
const BusyMachine = 0.2

// Starvation is what a LagProbe saw over a cell: this process's mean
// wake-up lateness, and the machine's CPU pressure (the fraction of the
// time some task waited for a CPU; -1 if unknown, e.g. not Linux).
type Starvation struct {
	Lag      time.Duration
	Pressure float64
}

// Worse is the worse of s and o in each measure, for a verdict over
// several cells.
func (s Starvation) Worse(o Starvation) Starvation {
	return Starvation{Lag: max(s.Lag, o.Lag), Pressure: max(s.Pressure, o.Pressure)}
}

// Doubt adds to c the reasons s makes cells (e.g. "the oracle row")
// undecidable: their client was late to wake, or the machine was busy.
func (s Starvation) Doubt(c *report.Check, cells string) *report.Check {
	cond, why := Starved("the client of "+cells, s.Lag)
	c.Doubt(cond, "%s", why)
	return c.Doubt(s.Pressure > BusyMachine, "machine CPU-starved during %s (some task waited for a CPU %.0f%% of the time > %.0f%%): rerun on a quieter machine",
		cells, 100*s.Pressure, 100*BusyMachine)
}

// cpuStall is the machine's cumulative time some task waited for a CPU
// (the "some total" of /proc/pressure/cpu), if the kernel reports it.
func cpuStall() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "some ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				us, err := strconv.ParseInt(v, 10, 64)
				return time.Duration(us) * time.Microsecond, err == nil
			}
		}
	}
	return 0, false
}
