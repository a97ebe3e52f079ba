package service

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune/internal/sched"
)

// Yield is what answering a request is worth by its response time r
// (dissertation §4.2.1): Full up to PreDeadline, then falling linearly to
// Penalty at Deadline, and nothing after Deadline. Build one with
// ThroughputYield, ResponseTimeYield or HybridYield.
type Yield struct {
	Full        float64
	PreDeadline time.Duration
	Penalty     float64
	Deadline    time.Duration
}

// ThroughputYield is worth c when answered within d and nothing after.
func ThroughputYield(c float64, d time.Duration) Yield {
	return Yield(sched.Throughput(c, d))
}

// ResponseTimeYield decays linearly from c at once to nothing at d.
func ResponseTimeYield(c float64, d time.Duration) Yield {
	return Yield(sched.ResponseTime(c, d))
}

// HybridYield is worth c up to dPre, then decays linearly to the drop
// penalty cDrop at d, and is worthless after d.
func HybridYield(c float64, dPre time.Duration, cDrop float64, d time.Duration) Yield {
	return Yield(sched.Hybrid(c, dPre, cDrop, d))
}

// At is the yield of a response after r.
func (y Yield) At(r time.Duration) float64 { return sched.Yield(y).At(r) }

// Class is a service class: requests whose Request.Class names it share a
// yield function and, optionally, a guaranteed share of the service's
// resources on each node.
type Class struct {
	Name  string
	Yield Yield
	// Guarantee is the minimum share (0..1) of the service's resources on a
	// node that the class gets whenever it has queued work; the
	// guarantees of a service sum to at most 1.
	Guarantee float64
	// Estimate is the expected resource use of a request until one has been
	// measured; zero lets the scheduler learn it.
	Estimate time.Duration
}

// SchedPolicy is how a node orders the queued requests of different
// classes once every guarantee is met (dissertation Table 4.1).
type SchedPolicy int

const (
	// Adaptive uses YID until more than 5 % of the requests in the last 30 s
	// were dropped, then Greedy. The default.
	Adaptive = SchedPolicy(sched.Adaptive)
	// EDF serves the earliest deadline first.
	EDF = SchedPolicy(sched.EDF)
	// YID serves the smallest remaining time per unit of expected yield.
	YID = SchedPolicy(sched.YID)
	// Greedy serves the smallest expected resource use per unit of yield.
	Greedy = SchedPolicy(sched.Greedy)
)

func (p SchedPolicy) String() string { return sched.Policy(p).String() }

// ParseSchedPolicy parses "adaptive", "edf", "yid" or "greedy".
func ParseSchedPolicy(s string) (SchedPolicy, error) {
	p, err := sched.ParsePolicy(strings.ToLower(s))
	return SchedPolicy(p), err
}

// Accounting says how a service's requests are charged against the class
// guarantees.
type Accounting int

const (
	// WallTime charges the time a request held a worker slot. The default:
	// right for handlers that mostly wait (I/O, downstream calls, sleeps)
	// when the slot is the scarce resource.
	WallTime Accounting = iota
	// ThreadCPU charges the CPU time of the handler's thread: the handler
	// runs with its goroutine locked to an OS thread and is charged that
	// thread's CPU clock. Accurate for handlers that compute on their own
	// goroutine; work it hands to other goroutines is not seen.
	ThreadCPU
	// Reported charges Response.Cost, which the handler sets (a handler
	// that returns no response or no cost is charged its wall time).
	Reported
)

var accountingNames = [...]string{WallTime: "wall", ThreadCPU: "cpu", Reported: "reported"}

func (a Accounting) String() string {
	if a < 0 || int(a) >= len(accountingNames) {
		return fmt.Sprintf("Accounting(%d)", int(a))
	}
	return accountingNames[a]
}

// ParseAccounting parses "wall", "cpu" or "reported".
func ParseAccounting(s string) (Accounting, error) {
	for a, n := range accountingNames {
		if strings.EqualFold(n, s) {
			return Accounting(a), nil
		}
	}
	return 0, fmt.Errorf("neptune: accounting %q is not wall, cpu or reported", s)
}

// schedConfig converts the service's classes for the node scheduler; a
// service without classes is served in FIFO order.
func (s *Service) schedConfig() (sched.Config, bool) {
	if len(s.Classes) == 0 {
		return sched.Config{}, false
	}
	cfg := sched.Config{Policy: sched.Policy(s.Policy), Default: s.DefaultClass, OverloadWindow: s.OverloadWindow}
	for _, c := range s.Classes {
		cfg.Classes = append(cfg.Classes, sched.ClassConfig{Name: c.Name, Yield: sched.Yield(c.Yield), Guarantee: c.Guarantee, Estimate: c.Estimate})
	}
	return cfg, true
}

// NewScheduler returns the scheduler a node gives the service's pool:
// the class scheduler for a service with Classes, FIFO otherwise.
func (s *Service) NewScheduler() (sched.Scheduler, error) {
	cfg, ok := s.schedConfig()
	if !ok {
		return sched.NewFIFO(), nil
	}
	return sched.NewClassScheduler(cfg)
}

// validateClasses checks Classes, Policy, DefaultClass and Accounting; the
// message names the field in Service terms.
func (s *Service) validateClasses() error {
	where := fmt.Sprintf("neptune: service %q", s.Name)
	if s.Accounting < WallTime || s.Accounting > Reported {
		return fmt.Errorf("%s: Accounting is %v, want WallTime, ThreadCPU or Reported", where, s.Accounting)
	}
	cfg, ok := s.schedConfig()
	if !ok {
		if s.Policy != Adaptive || s.DefaultClass != "" || len(s.IdentityClasses) > 0 || s.OverloadWindow != 0 {
			return fmt.Errorf("%s: Policy, DefaultClass, IdentityClasses and OverloadWindow need Classes", where)
		}
		return nil
	}
	known := func(name string) bool {
		return slices.ContainsFunc(s.Classes, func(c Class) bool { return c.Name == name })
	}
	if s.DefaultClass != "" && !known(s.DefaultClass) {
		return fmt.Errorf("%s: DefaultClass %q names none of Classes", where, s.DefaultClass)
	}
	for id, class := range s.IdentityClasses {
		if role, name, ok := strings.Cut(id, "/"); !ok || role == "" || name == "" {
			return fmt.Errorf("%s: IdentityClasses: %q is not an identity (role/name, e.g. client/partner)", where, id)
		}
		if !known(class) {
			return fmt.Errorf("%s: IdentityClasses[%q]: %q names none of Classes", where, id, class)
		}
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	return nil
}
