package bench

import (
	"context"
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
// It also reads, at its start and stop, the CPU the machine spent outside
// this benchmark: busy CPU time (user, nice, system: /proc/stat) minus
// what this process and its descendants used (the node, client and
// server processes a benchmark starts), plus the time the hypervisor ran
// something else on this machine's CPUs (steal). A sleeping probe wakes
// promptly even on a machine whose cores are all taken (the scheduler
// favours sleepers), so the lateness alone flags a process starved by its
// own load, the other work one starved by others. The machine's CPU
// pressure (Linux PSI) is read too, and printed, but judges a cell only
// when the other work cannot be read: on a 2-core VM it mostly measures
// the benchmark's own wake-ups (one sequential caller and one server on
// an idle machine show 40–55%).
type LagProbe struct {
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	sum   time.Duration
	n     int
	psi0  time.Duration
	psiOK bool
	cpu0  cpuSample
	t0    time.Time
}

// StartLagProbe starts a probe that wakes every period.
func StartLagProbe(period time.Duration) *LagProbe {
	p := &LagProbe{stop: make(chan struct{}), done: make(chan struct{}), t0: time.Now()}
	p.psi0, p.psiOK = cpuStall()
	p.cpu0 = sampleCPU()
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
	st := Starvation{Lag: p.Mean(), Pressure: -1, Others: -1}
	el := time.Since(p.t0)
	if stall, ok := cpuStall(); ok && p.psiOK && el > 0 {
		st.Pressure = float64(stall-p.psi0) / float64(el)
	}
	if cpu1 := sampleCPU(); cpu1.ok && p.cpu0.ok && el > 0 {
		st.Others = otherCores(p.cpu0, cpu1, el)
	}
	return st
}

// Before is what the machine did in the second before a benchmark starts
// its processes. Other work is judged over the whole run, but a closed
// loop's lateness and CPU pressure during the run are its own, so they
// are judged here, before it (see WithOthers). It returns early if ctx
// ends.
func Before(ctx context.Context) Starvation {
	p := StartLagProbe(10 * time.Millisecond)
	Sleep(ctx, time.Second)
	return p.Stop()
}

// WithOthers is s (read Before a run) with the other work seen during
// the run if that was more: what a closed-loop benchmark is judged on.
func (s Starvation) WithOthers(during Starvation) Starvation {
	s.Others = max(s.Others, during.Others)
	return s
}

// BusyMachine is the CPU pressure above which the machine counts as
// starved when the other work cannot be read (Starvation.Others unknown):
// some task waited for a CPU more than this fraction of the time.
const BusyMachine = 0.2

// OtherWork is the CPU, in cores, that work outside the benchmark may use
// during a cell before the cell counts as starved by it: a tenth of this
// 2-core machine. The idle machine's daemons use about 0.02.
const OtherWork = 0.2

// Starvation is what a LagProbe saw over a cell: this process's mean
// wake-up lateness; the cores the machine spent on work outside this
// benchmark (Others); and the machine's CPU pressure (the fraction of the
// time some task waited for a CPU). Others and Pressure are -1 if unknown
// (e.g. not Linux).
type Starvation struct {
	Lag      time.Duration
	Pressure float64
	Others   float64
}

// Worse is the worse of s and o in each measure, for a verdict over
// several cells.
func (s Starvation) Worse(o Starvation) Starvation {
	return Starvation{Lag: max(s.Lag, o.Lag), Pressure: max(s.Pressure, o.Pressure), Others: max(s.Others, o.Others)}
}

// Doubt adds to c the reasons s makes cells (e.g. "the oracle row")
// undecidable: their client was late to wake, or other work took the
// machine's CPU (judged on the pressure when the other work is unknown).
func (s Starvation) Doubt(c *report.Check, cells string) *report.Check {
	cond, why := Starved("the client of "+cells, s.Lag)
	c.Doubt(cond, "%s", why)
	if s.Others < 0 {
		return c.Doubt(s.Pressure > BusyMachine, "machine CPU-starved during %s (some task waited for a CPU %.0f%% of the time > %.0f%%, and the work outside this benchmark could not be read): rerun on a quieter machine",
			cells, 100*s.Pressure, 100*BusyMachine)
	}
	return c.Doubt(s.Others > OtherWork, "other work on the machine during %s (%.2f cores used outside this benchmark, steal included, > %.2f): rerun on a quieter machine",
		cells, s.Others, OtherWork)
}

// String is the machine's side of s for a progress line: the cores other
// work used and the CPU pressure ("?" when unknown).
func (s Starvation) String() string {
	others, press := "?", "?"
	if s.Others >= 0 {
		others = fmt.Sprintf("%.2f", s.Others)
	}
	if s.Pressure >= 0 {
		press = fmt.Sprintf("%.0f%%", 100*s.Pressure)
	}
	return fmt.Sprintf("other work %s cores, CPU pressure %s", others, press)
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
