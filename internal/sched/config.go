package sched

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidConfig wraps every configuration error; the message names the
// offending field.
var ErrInvalidConfig = errors.New("sched: invalid config")

// Policy chooses among the class queue heads once every guarantee is met
// (dissertation Table 4.1; smaller priority runs first).
type Policy int

const (
	// Adaptive uses YID until more than Config.OverloadDrops of the requests
	// that arrived in the last Config.OverloadWindow were dropped, then
	// Greedy. It is the zero value and the default.
	Adaptive Policy = iota
	// EDF runs the request with the earliest deadline.
	EDF
	// YID runs the smallest relative deadline divided by expected yield.
	YID
	// Greedy runs the smallest expected resource use per unit of expected
	// yield.
	Greedy
)

var policyNames = [...]string{Adaptive: "adaptive", EDF: "edf", YID: "yid", Greedy: "greedy"}

// String returns the lower-case policy name used by ParsePolicy.
func (p Policy) String() string {
	if p < 0 || int(p) >= len(policyNames) {
		return fmt.Sprintf("Policy(%d)", int(p))
	}
	return policyNames[p]
}

// ParsePolicy maps "edf", "yid", "greedy" or "adaptive" to its Policy.
func ParsePolicy(s string) (Policy, error) {
	for p, n := range policyNames {
		if n == s {
			return Policy(p), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown policy %q (want edf, yid, greedy or adaptive)", ErrInvalidConfig, s)
}

// ClassConfig describes one service class.
type ClassConfig struct {
	// Name is what Request.Class carries.
	Name string
	// Yield is what a request of this class is worth by response time.
	Yield Yield
	// Guarantee is the minimum share of the node's resources the class gets
	// whenever it has queued work (g_k in [0, 1]; 0 means none).
	Guarantee float64
	// Estimate seeds the class's expected service time and resource use
	// until its first request finishes. Zero makes an unmeasured class look
	// free, so Greedy tries it early and learns its cost.
	Estimate time.Duration
}

// Config configures a ClassScheduler. Zero numeric fields take the defaults
// given in their comments.
type Config struct {
	// Classes lists the service classes; at least one.
	Classes []ClassConfig
	// Default names the class of requests whose Class is empty or unknown;
	// empty means the first class.
	Default string
	// Policy picks among classes once guarantees are met.
	Policy Policy
	// Beta is the per-second decay of past resource use in the guarantee
	// accounting (β; default 0.95, so usage has a ~20 s memory).
	Beta float64
	// GuaranteeWindow is the horizon over which guarantees hold: a class
	// that used less than its Guarantee of the resources charged in the last
	// GuaranteeWindow is served before any other rule (default 1 s).
	GuaranteeWindow time.Duration
	// Smoothing is the EWMA weight of the newest sample in the expected
	// service time and resource use (default 0.125, as TCP's RTT filter).
	Smoothing float64
	// DropBelow is the fraction of a class's full yield under which a
	// queued request's expected yield counts as (near-)zero, so it is
	// dropped instead of run (default 0.01).
	DropBelow float64
	// OverloadWindow is how far back Adaptive looks at drops (default 30 s).
	OverloadWindow time.Duration
	// OverloadDrops is the fraction of arrivals dropped within
	// OverloadWindow above which Adaptive switches to Greedy (default 0.05).
	OverloadDrops float64
}

// withDefaults fills the zero numeric fields.
func (c Config) withDefaults() Config {
	if c.Beta == 0 {
		c.Beta = 0.95
	}
	if c.GuaranteeWindow == 0 {
		c.GuaranteeWindow = time.Second
	}
	if c.Smoothing == 0 {
		c.Smoothing = 0.125
	}
	if c.DropBelow == 0 {
		c.DropBelow = 0.01
	}
	if c.OverloadWindow == 0 {
		c.OverloadWindow = 30 * time.Second
	}
	if c.OverloadDrops == 0 {
		c.OverloadDrops = 0.05
	}
	return c
}

// Validate reports the first invalid field of c (after defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...)
	}
	if len(c.Classes) == 0 {
		return bad("Classes is empty, want at least one class")
	}
	seen := make(map[string]bool, len(c.Classes))
	sum := 0.0
	for i, k := range c.Classes {
		switch {
		case k.Name == "":
			return bad("Classes[%d].Name is empty", i)
		case seen[k.Name]:
			return bad("Classes[%d].Name %q is a duplicate", i, k.Name)
		case !(k.Guarantee >= 0 && k.Guarantee <= 1):
			return bad("Classes[%d].Guarantee (%q) is %v, want in [0, 1]", i, k.Name, k.Guarantee)
		case k.Estimate < 0:
			return bad("Classes[%d].Estimate (%q) is %v, want ≥ 0", i, k.Name, k.Estimate)
		}
		if err := k.Yield.Validate(); err != nil {
			return bad("Classes[%d].Yield (%q): %v", i, k.Name, err)
		}
		seen[k.Name] = true
		sum += k.Guarantee
	}
	switch {
	case sum > 1+1e-9:
		return bad("Classes[*].Guarantee sum to %v, want ≤ 1", sum)
	case c.Default != "" && !seen[c.Default]:
		return bad("Default %q names no class", c.Default)
	case c.Policy < Adaptive || c.Policy > Greedy:
		return bad("Policy is %v", c.Policy)
	case !(c.Beta > 0 && c.Beta < 1):
		return bad("Beta is %v, want in (0, 1)", c.Beta)
	case c.GuaranteeWindow < 0:
		return bad("GuaranteeWindow is %v, want > 0", c.GuaranteeWindow)
	case !(c.Smoothing > 0 && c.Smoothing <= 1):
		return bad("Smoothing is %v, want in (0, 1]", c.Smoothing)
	case !(c.DropBelow > 0 && c.DropBelow < 1):
		return bad("DropBelow is %v, want in (0, 1)", c.DropBelow)
	case c.OverloadWindow < 0:
		return bad("OverloadWindow is %v, want > 0", c.OverloadWindow)
	case !(c.OverloadDrops > 0 && c.OverloadDrops < 1):
		return bad("OverloadDrops is %v, want in (0, 1)", c.OverloadDrops)
	}
	return nil
}
