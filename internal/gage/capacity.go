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
	// Utilization is the fraction (0..1) of the interval the node had as
	// many requests in service as it runs at once: how close to saturated
	// the measured usage was.
	Utilization float64
}

// EstimatorOptions tune a CapacityEstimator; zero fields take defaults.
type EstimatorOptions struct {
	// Alpha smooths each node's estimate across reports (default 0.8).
	Alpha float64
	// MinUtilization is the utilization below which a report does not
	// change an existing estimate (default 0.5): extrapolating a lightly
	// loaded node's usage to saturation is mostly noise.
	MinUtilization float64
	// Headroom is the fraction of the estimate handed to the schedulers
	// (default 0.95): dispatching at exactly the capacity keeps the nodes'
	// queues on the edge of growing without bound.
	Headroom float64
	// TTL drops a node not heard from for this long (default 3 s).
	TTL time.Duration
}

// CapacityEstimator turns node reports into the cluster's capacity in GRPS
// (issue 12 item 7; §3.4's "sums up available resources at the RPNs"). A
// node's capacity is the GRU rate it served over the interval, divided by
// its utilization: measured, so it reflects the real mix of requests and
// what the services actually cost rather than a datasheet.
//
// GRPS is taken on the node's bottleneck resource (Unit.Cost of the total
// usage). That is conservative for complementary mixes (CPU-bound and
// disk-bound subscribers side by side can together exceed it), which errs
// on the side of keeping reservations.
type CapacityEstimator struct {
	unit  Unit
	opt   EstimatorOptions
	nodes map[string]*nodeEstimate
}

type nodeEstimate struct {
	grps float64
	seen time.Time
}

// NewCapacityEstimator returns an estimator measuring in unit u.
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
	if r.Node == "" || r.Interval <= 0 || r.Utilization <= 0 {
		if n, ok := e.nodes[r.Node]; ok {
			n.seen = now // alive, idle: keep the estimate
		}
		return
	}
	sample := e.unit.Cost(r.Used) / r.Interval.Seconds() / min(r.Utilization, 1)
	n, ok := e.nodes[r.Node]
	switch {
	case !ok:
		e.nodes[r.Node] = &nodeEstimate{grps: sample, seen: now}
		return
	case r.Utilization >= e.opt.MinUtilization:
		n.grps = e.opt.Alpha*n.grps + (1-e.opt.Alpha)*sample
	}
	n.seen = now
}

// Forget drops a node at once (it left the membership).
func (e *CapacityEstimator) Forget(node string) { delete(e.nodes, node) }

// Nodes returns each live node's estimate in GRPS, before headroom.
func (e *CapacityEstimator) Nodes(now time.Time) map[string]float64 {
	out := map[string]float64{}
	for name, n := range e.nodes {
		if now.Sub(n.seen) <= e.opt.TTL {
			out[name] = n.grps
		}
	}
	return out
}

// GRPS is the capacity handed to the schedulers: the live nodes' estimates
// summed, times the headroom.
func (e *CapacityEstimator) GRPS(now time.Time) float64 {
	t := 0.0
	for _, g := range e.Nodes(now) {
		t += g
	}
	return t * e.opt.Headroom
}

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
