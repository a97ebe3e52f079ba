package gage

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// NodeReport is what a node says about itself each accounting cycle (§3.4:
// "the total resource usage at that RPN during that accounting cycle").
type NodeReport struct {
	Node string
	// Interval is the accounting cycle the report covers.
	Interval time.Duration
	// Used is the usage of all requests completed on the node during the
	// interval, every subscriber together.
	Used Vector
	// Busy is, per resource, the fraction (0..1) of the interval the
	// resource was saturated: CPU time over cores, disk busy time (what
	// iostat calls %util), bytes over link speed.
	Busy Vector
	// Declared is the node's own idea of its capacity per second (cores,
	// disks, link speed), the estimate until it has served something;
	// zero components are unknown.
	Declared Vector
}

// EstimatorOptions tune a CapacityEstimator; zero fields take defaults.
type EstimatorOptions struct {
	// Alpha smooths each node's estimate across reports (default 0.8).
	Alpha float64
	// MinUtilization is the busy fraction below which a report only ever
	// raises an estimate (default 0.5): extrapolating a lightly used
	// resource to saturation is noisy, but an estimate that could only
	// be lowered from a saturated node would never recover from a low
	// start.
	MinUtilization float64
	// Headroom is the fraction of the estimate handed to the schedulers
	// (default 0.95): dispatching at exactly the capacity keeps the nodes'
	// queues on the edge of growing without bound.
	Headroom float64
	// TTL drops a node not heard from for this long (default 3 s).
	TTL time.Duration
}

// CapacityEstimator turns node reports into the cluster's capacity per
// resource, and in GRPS (issue 12 item 7; §3.4's "sums up available
// resources at the RPNs"). A node's capacity in a resource is what it used
// of it over the interval divided by how busy the resource was: measured,
// so it reflects what the services really cost and what the node really
// delivers, not a datasheet.
//
// The loop this closes with the schedulers converges from either side: an
// estimate too high saturates the nodes, which then report what they
// really do; too low, they are partly idle and the extrapolation shows the
// room left.
type CapacityEstimator struct {
	unit  Unit
	opt   EstimatorOptions
	nodes map[string]*nodeEstimate
}

type nodeEstimate struct {
	capacity Vector // per second
	seen     time.Time
	// loaded: the resource's figure was declared by the node or took a
	// sample at MinUtilization or more. Until then it is an extrapolation from a nearly idle
	// resource, where the node's own background work (gossip, GC) and
	// the machine's other disk users outweigh the requests: it may be
	// off by orders of magnitude.
	loaded [NumResources]bool
}

// NewCapacityEstimator returns an estimator for unit u.
func NewCapacityEstimator(u Unit, opt EstimatorOptions) (*CapacityEstimator, error) {
	if err := u.Validate(); err != nil {
		return nil, fmt.Errorf("gage: capacity estimator: unit: %w", err)
	}
	if opt.Alpha < 0 || opt.Alpha >= 1 || opt.MinUtilization < 0 || opt.MinUtilization > 1 ||
		opt.Headroom < 0 || opt.Headroom > 1 || opt.TTL < 0 {
		return nil, fmt.Errorf("gage: capacity estimator: options out of range: %+v", opt)
	}
	if opt.Alpha == 0 {
		opt.Alpha = 0.8
	}
	if opt.MinUtilization == 0 {
		opt.MinUtilization = 0.5
	}
	if opt.Headroom == 0 {
		opt.Headroom = 0.95
	}
	if opt.TTL == 0 {
		opt.TTL = 3 * time.Second
	}
	return &CapacityEstimator{unit: u, opt: opt, nodes: map[string]*nodeEstimate{}}, nil
}

// Observe takes a node's report received at now.
func (e *CapacityEstimator) Observe(now time.Time, r NodeReport) {
	if r.Node == "" {
		return
	}
	n, ok := e.nodes[r.Node]
	if !ok {
		n = &nodeEstimate{}
		e.nodes[r.Node] = n
	}
	n.seen = now
	for i := range n.capacity {
		if n.capacity[i] == 0 && r.Declared[i] > 0 {
			n.capacity[i], n.loaded[i] = r.Declared[i], true
		}
		if r.Interval <= 0 || r.Busy[i] <= 0 || r.Used[i] <= 0 {
			continue // idle in this resource: keep the estimate
		}
		sample := r.Used[i] / r.Interval.Seconds() / min(r.Busy[i], 1)
		switch {
		case n.capacity[i] == 0:
			n.capacity[i] = sample
		case r.Busy[i] >= e.opt.MinUtilization || sample > n.capacity[i]:
			n.capacity[i] = e.opt.Alpha*n.capacity[i] + (1-e.opt.Alpha)*sample
		}
		if r.Busy[i] >= e.opt.MinUtilization {
			n.loaded[i] = true
		}
	}
}

// Loaded reports whether every figure the live nodes have was declared
// or measured under load (a sample at MinUtilization or more), so that
// the capacity is more than an extrapolation from idle nodes; false
// without figures.
func (e *CapacityEstimator) Loaded(now time.Time) bool {
	some := false
	for _, n := range e.nodes {
		if now.Sub(n.seen) > e.opt.TTL {
			continue
		}
		for i, c := range n.capacity {
			if c > 0 && !n.loaded[i] {
				return false
			}
			some = some || c > 0
		}
	}
	return some
}

// Forget drops a node at once (it left the membership).
func (e *CapacityEstimator) Forget(node string) { delete(e.nodes, node) }

// Nodes returns each live node's estimate (per second), before headroom.
func (e *CapacityEstimator) Nodes(now time.Time) map[string]Vector {
	out := map[string]Vector{}
	for name, n := range e.nodes {
		if now.Sub(n.seen) <= e.opt.TTL {
			out[name] = n.capacity
		}
	}
	return out
}

// Capacity is what the schedulers get (Scheduler.SetCapacity): the live
// nodes' estimates summed, times the headroom.
func (e *CapacityEstimator) Capacity(now time.Time) Vector {
	var t Vector
	for _, c := range e.Nodes(now) {
		t = t.Add(c)
	}
	return t.Scale(e.opt.Headroom)
}

// GRPS is Capacity in generic requests per second, set by the scarcest
// resource: what reservations are admitted against. It is conservative
// for complementary mixes (CPU-bound and network-bound subscribers side by
// side can together be served more), which errs on the side of keeping
// reservations.
func (e *CapacityEstimator) GRPS(now time.Time) float64 { return e.unit.GRPS(e.Capacity(now)) }

// OverbookedError says that reservations exceed the capacity, naming the
// subscribers that do not fit: taken in config order, the ones whose
// reservation pushes the total past the capacity.
type OverbookedError struct {
	Capacity float64 // GRPS
	Reserved float64 // GRPS, all subscribers
	Over     []string
}

func (e *OverbookedError) Error() string {
	return fmt.Sprintf("gage: reservations total %.1f GRPS, over the capacity of %.1f GRPS; not covered: %s",
		e.Reserved, e.Capacity, strings.Join(e.Over, ", "))
}

// ErrOverbooked matches every *OverbookedError with errors.Is.
var ErrOverbooked = errors.New("gage: reservations exceed capacity")

func (e *OverbookedError) Is(target error) bool { return target == ErrOverbooked }

// Admit checks cfg's reservations against a capacity in GRPS: nil if they
// fit, else an *OverbookedError. Whether to refuse the config or warn is
// the caller's choice (a capacity estimate from a cluster still starting is
// low).
func Admit(cfg Config, capacity float64) error {
	total, over := 0.0, []string{}
	for _, s := range cfg.Subscribers {
		if s.Reservation <= 0 {
			continue
		}
		total += s.Reservation
		if total > capacity*(1+1e-9) {
			over = append(over, s.Name)
		}
	}
	if len(over) == 0 {
		return nil
	}
	return &OverbookedError{Capacity: capacity, Reserved: total, Over: over}
}
