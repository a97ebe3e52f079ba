package gage

import (
	"fmt"
	"time"
)

// Resource names one dimension of a Vector.
type Resource int

// The resources Gage accounts for (paper §3.1, §3.5). CPU and disk are in
// seconds of use (CPU time; disk channel time, or its stand-in the node
// measures), network in bytes moved.
const (
	CPU Resource = iota
	Disk
	Net
	NumResources
)

func (r Resource) String() string {
	switch r {
	case CPU:
		return "cpu"
	case Disk:
		return "disk"
	case Net:
		return "net"
	}
	return fmt.Sprintf("resource(%d)", int(r))
}

// Vector is an amount of each resource: seconds of CPU, seconds of disk,
// bytes of network. Usage reports, predictions, credits and capacities are
// all vectors, because the paper keeps one balance per resource (§3.5).
type Vector [NumResources]float64

// Res builds a Vector from the units people write.
func Res(cpu, disk time.Duration, netBytes int64) Vector {
	return Vector{CPU: cpu.Seconds(), Disk: disk.Seconds(), Net: float64(netBytes)}
}

// Add returns v+w.
func (v Vector) Add(w Vector) Vector {
	for i := range v {
		v[i] += w[i]
	}
	return v
}

// Sub returns v-w.
func (v Vector) Sub(w Vector) Vector {
	for i := range v {
		v[i] -= w[i]
	}
	return v
}

// Scale returns v*k.
func (v Vector) Scale(k float64) Vector {
	for i := range v {
		v[i] *= k
	}
	return v
}

// Min returns the componentwise minimum of v and w.
func (v Vector) Min(w Vector) Vector {
	for i := range v {
		v[i] = min(v[i], w[i])
	}
	return v
}

// Max returns the componentwise maximum of v and w.
func (v Vector) Max(w Vector) Vector {
	for i := range v {
		v[i] = max(v[i], w[i])
	}
	return v
}

// IsZero reports whether every component is zero.
func (v Vector) IsZero() bool { return v == Vector{} }

func (v Vector) String() string {
	return fmt.Sprintf("{cpu %.4gs disk %.4gs net %.0fB}", v[CPU], v[Disk], v[Net])
}

// DefaultUnit is the paper's generic request (§3.1, repeated in §3.6): 10 ms
// of CPU, 10 ms of disk channel time and 2,000 bytes of network.
var DefaultUnit = Unit(Res(10*time.Millisecond, 10*time.Millisecond, 2000))

// Unit is one generic request unit (GRU): the resources a generic request
// is entitled to. A reservation of R GRPS entitles a subscriber to R times
// each component per second (§3.1: "50 GRPS ... entitled to 500 msec of CPU
// time, 500 msec of disk access time ... and 100 KBytes of network
// bandwidth ... within every second"). A zero component takes that resource
// out of scheduling, as the paper's prototype did with the network
// (footnote 1).
type Unit Vector

// Validate says what is wrong with u, if anything.
func (u Unit) Validate() error {
	some := false
	for r, x := range u {
		if x < 0 || x != x {
			return fmt.Errorf("%s: must be >= 0, got %v", Resource(r), x)
		}
		some = some || x > 0
	}
	if !some {
		return fmt.Errorf("at least one resource must be > 0")
	}
	return nil
}

// Times is the resource vector of grus generic requests: a reservation or
// capacity in GRPS times one second, or a credit for a cycle.
func (u Unit) Times(grus float64) Vector { return Vector(u).Scale(grus) }

// Cost is v in GRU: the largest of usage/unit over the scheduled
// resources.
//
// Why the maximum and not a sum: §3.1 entitles a reservation to so much of
// each resource separately, and §3.5 keeps one balance per resource and
// stops dispatching "until one of them becomes negative". A subscriber is
// therefore held back by whichever resource it exhausts first, its
// bottleneck, and that is what one of its requests "costs" against the
// reservation. The schedulers account per resource (Vector balances); Cost
// is the scalar view for reports, capacity in GRPS and the tag scheduler,
// which has one cost per request by design.
func (u Unit) Cost(v Vector) float64 {
	c := 0.0
	for r, x := range u {
		if x > 0 {
			c = max(c, v[r]/x)
		}
	}
	return c
}

// positive reports whether every scheduled component of v is > 0: the
// paper's "balance not yet negative" test (§3.4, §3.5), taken strictly so
// that a zero balance waits for the next credit.
func (u Unit) positive(v Vector) bool {
	for r, x := range u {
		if x > 0 && v[r] <= 0 {
			return false
		}
	}
	return true
}

// withinOne reports whether balance bal is in debt by less than one
// request of predicted usage pred in every scheduled resource: bal+pred > 0
// where the request uses the resource, and bal >= 0 where it uses none.
// The second case is why this is not positive(bal+pred): a subscriber
// whose requests use none of a resource (cached reads, no disk; empty
// bodies, no network) owes nothing there, and with a zero balance, as a
// subscriber without reservation always has, it would otherwise never
// qualify for the spare.
func (u Unit) withinOne(bal, pred Vector) bool {
	for r, x := range u {
		switch {
		case x <= 0:
		case pred[r] > 0 && bal[r]+pred[r] <= 0:
			return false
		case pred[r] <= 0 && bal[r] < 0:
			return false
		}
	}
	return true
}

// clamp bounds each component of v to [lo, hi].
func clamp(v, lo, hi Vector) Vector {
	for i := range v {
		v[i] = min(max(v[i], lo[i]), hi[i])
	}
	return v
}
