package cpuquota

import (
	"fmt"
	"runtime"
	"strings"
	"time"
)

// Tolerance is how far a process's CPU may exceed its quota: the kernel
// enforces the quota per period (10 ms).
const Tolerance = 0.05

// Resolution is how far a window's measured CPU may be off the true one:
// /proc counts a process's user and system time in 10 ms ticks, each
// rounded down, so the difference of two readings errs by up to two
// ticks. In a short window of a small quota that is more than Tolerance
// (3 s at 0.09 cores: 20 of 270 ms), so it is allowed on top.
const Resolution = 2 * time.Second / clockTicks

// MinIdle is the share of the machine's CPU that must stay idle during a
// measured window: below it, some process may have wanted its quota and
// not got it, so the window is starved and judged INCONCLUSIVE.
const MinIdle = 0.05

// Usage is what one confined process used in a window.
type Usage struct {
	Name  string
	Cores float64       // its quota
	Used  time.Duration // CPU time in the window
}

// Judgment says whether a window measured what it claims.
type Judgment struct {
	// Over lists processes that used more than their quota (beyond
	// Tolerance): the confinement failed, nothing measured is valid.
	Over []string
	// Starved is set when the machine had less than MinIdle of its CPU
	// idle: a process may have been denied its quota.
	Starved bool
	// Reason says why, in words, when Over or Starved.
	Reason string
}

// OK reports that the window is valid: every quota held and nobody was
// starved.
func (j Judgment) OK() bool { return len(j.Over) == 0 && !j.Starved }

// Judge judges a window of length window on a machine of ncpu cores whose
// idle time in the window was idle. Pure: the Meter reads the clocks.
func Judge(window time.Duration, ncpu int, idle time.Duration, procs []Usage) Judgment {
	var j Judgment
	var why []string
	for _, p := range procs {
		allowed := time.Duration(p.Cores*(1+Tolerance)*float64(window)) + Resolution
		if rate := p.Used.Seconds() / window.Seconds(); p.Used > allowed {
			j.Over = append(j.Over, p.Name)
			why = append(why, fmt.Sprintf("%s used %.3f cores, above its quota of %.3f", p.Name, rate, p.Cores))
		}
	}
	if share := idle.Seconds() / (window.Seconds() * float64(ncpu)); share < MinIdle {
		j.Starved = true
		why = append(why, fmt.Sprintf("the machine was %.1f%% idle (< %.0f%%): a process may have been denied its quota", 100*share, 100*MinIdle))
	}
	j.Reason = strings.Join(why, "; ")
	return j
}

// Fits refuses a plan whose quotas, with reserve cores left for the load
// generator and the rest, do not fit in the machine: each process could
// not have its quota at once.
func Fits(cores []float64, reserve float64) error {
	sum := reserve
	for _, c := range cores {
		sum += c
	}
	if n := float64(runtime.NumCPU()); sum > n {
		return fmt.Errorf("cpuquota: %d processes' quotas and %.2f reserved need %.2f cores, the machine has %.0f", len(cores), reserve, sum, n)
	}
	return nil
}

// Meter measures confined processes over a window.
type Meter struct {
	procs []meterProc
	start time.Time
	idle  time.Duration
}

type meterProc struct {
	name  string
	pid   int
	cores float64
	cpu0  time.Duration
}

// Watch adds process pid, confined to cores, to the meter; call it before
// Start.
func (m *Meter) Watch(name string, pid int, cores float64) {
	m.procs = append(m.procs, meterProc{name: name, pid: pid, cores: cores})
}

// Start opens the window.
func (m *Meter) Start() error {
	for i := range m.procs {
		c, err := ProcessCPU(m.procs[i].pid)
		if err != nil {
			return err
		}
		m.procs[i].cpu0 = c
	}
	idle, err := MachineIdle()
	if err != nil {
		return err
	}
	m.start, m.idle = time.Now(), idle
	return nil
}

// Stop closes the window and judges it, with each process's usage.
func (m *Meter) Stop() (Judgment, []Usage, error) {
	window := time.Since(m.start)
	idle, err := MachineIdle()
	if err != nil {
		return Judgment{}, nil, err
	}
	us := make([]Usage, 0, len(m.procs))
	for _, p := range m.procs {
		c, err := ProcessCPU(p.pid)
		if err != nil {
			return Judgment{}, nil, fmt.Errorf("cpuquota: %s: %w", p.name, err)
		}
		us = append(us, Usage{Name: p.name, Cores: p.cores, Used: c - p.cpu0})
	}
	return Judge(window, runtime.NumCPU(), idle-m.idle, us), us, nil
}
