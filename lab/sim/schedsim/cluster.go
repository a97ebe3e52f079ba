package schedsim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/sched"
	"github.com/neptune-cluster/neptune/lab/sim"
)

// Cluster-level request distribution (dissertation §4.5.3–4.5.4): many
// nodes, each running a ClassScheduler, fed by clients that poll 3 random
// candidates and send to the least loaded (internal/balance's polling
// policy). Two distribution schemes:
//
//   - class-aware: every class may go to every node; a poll reports the
//     load a new request of the caller's class sees (active requests plus
//     that class's queue, as dispatch.Pool.LoadFor).
//   - partitioning: every PartitionInterval the servers are re-divided
//     among the classes by the demand of the last interval (the
//     dissertation's rule, after DDSD); a class polls only its servers.
//     Fractional allocations share servers of a shared pool, whose
//     schedulers guarantee each sharing class its fraction.

type scheme int

const (
	classAware scheme = iota
	partitioning
)

func (s scheme) String() string { return [...]string{"class-aware", "partitioning"}[s] }

// clusterConfig is one simulated cluster run.
type clusterConfig struct {
	scheme  scheme
	nodes   int
	workers int
	classes []sched.ClassConfig
	// cost is each class's mean resource use (s), the partitioning rule's
	// offline profile.
	cost []float64
	// rate is the class-k arrival rate (req/s) at time t; fixed arrivals
	// are evenly spaced, else Poisson (rate changes take effect at the
	// next arrival).
	rate    func(k int, t time.Duration) float64
	fixed   bool
	service func(rng *rand.Rand, k int) time.Duration
	// down reports whether node i has failed at t; nil means never.
	down     func(i int, t time.Duration) bool
	interval time.Duration // partitioning interval (10 s)
	duration time.Duration
	window   time.Duration // allocation sampling window (2 s)
	seed     uint64
	// phases are the starts of the phases whose offered and realized
	// yield the result breaks out, by the requests' arrival times; nil:
	// none.
	phases []time.Duration
}

type clusterResult struct {
	offered, realized float64
	// alloc[w][k] is class k's busy worker time in window w, and
	// demand[w][k] the service time of its arrivals in w, both as a
	// fraction of the cluster's capacity in the window.
	alloc, demand [][]float64
	// phaseOffered and phaseRealized are offered and realized by the
	// phase of clusterConfig.phases the request arrived in.
	phaseOffered, phaseRealized []float64
}

type cnode struct {
	s       *sched.ClassScheduler
	running []*sched.Request
	// serves[k] is the share of class k in this node's allocation under
	// partitioning (unused for class-aware).
	serves []float64
}

type cjob struct {
	class int
	svc   time.Duration
}

// clusterEvent is the arrival of a request of class, the completion of r
// on node, or (repartition) the end of a partitioning interval.
type clusterEvent struct {
	kind  int // arrival, completion or repartition
	class int
	node  int
	r     *sched.Request
}

const (
	arrival = iota
	completion
	repartitionDue
)

// The random streams of a cluster run.
const (
	streamCluster = 0xc1a55 // arrivals and service times
	streamClient  = 2       // the client's polling policy
)

// simulateCluster runs cfg on virtual time with every node's
// ClassScheduler and the client's polling policy as the node and client
// would run them.
func simulateCluster(cfg clusterConfig) (clusterResult, error) {
	eng := sim.New[clusterEvent](time.Unix(0, 0), cfg.seed)
	rng := eng.Rand(streamCluster)
	nk := len(cfg.classes)
	bc := balance.DefaultConfig()
	bc.Policy = balance.NamePolling // the dissertation's: poll 3, send to the least loaded
	pol, err := balance.New(bc, eng.Rand(streamClient))
	if err != nil {
		return clusterResult{}, err
	}
	nodes := make([]*cnode, cfg.nodes)
	ids := make([]string, cfg.nodes)
	for i := range nodes {
		nodes[i] = &cnode{serves: make([]float64, nk)}
		ids[i] = strconv.Itoa(i)
	}
	res := clusterResult{phaseOffered: make([]float64, len(cfg.phases)), phaseRealized: make([]float64, len(cfg.phases))}
	phaseOf := func(t time.Time) int { return phaseAt(cfg.phases, t.Sub(time.Unix(0, 0))) }
	nw := int(cfg.duration/cfg.window) + 1
	res.alloc, res.demand = make([][]float64, nw), make([][]float64, nw)
	for w := range nw {
		res.alloc[w], res.demand[w] = make([]float64, nk), make([]float64, nk)
	}
	capacity := float64(cfg.nodes*cfg.workers) * cfg.window.Seconds()
	addSpan := func(dst [][]float64, k int, from, to time.Duration) {
		for from < to && int(from/cfg.window) < nw {
			w := int(from / cfg.window)
			end := min(to, time.Duration(w+1)*cfg.window)
			dst[w][k] += (end - from).Seconds() / capacity
			from = end
		}
	}

	// Partitioning state: the last interval's demand per class (s of
	// service), seeded with the initial offered rates.
	used := make([]float64, nk)
	repartition := func(t time.Duration) error {
		d := make([]float64, nk)
		for k := range nk {
			if t == 0 {
				d[k] = cfg.rate(k, 0) * cfg.cost[k] / float64(cfg.workers)
			} else {
				d[k] = used[k] / cfg.interval.Seconds() / float64(cfg.workers)
			}
			used[k] = 0
		}
		alloc := partition(d, cfg.classes, cfg.cost, float64(cfg.nodes))
		return assign(nodes, alloc, cfg)
	}
	if cfg.scheme == partitioning {
		if err := repartition(0); err != nil {
			return res, err
		}
		eng.At(cfg.interval, clusterEvent{kind: repartitionDue})
	} else {
		for _, n := range nodes {
			if n.s, err = sched.NewClassScheduler(sched.Config{Classes: cfg.classes}); err != nil {
				return res, err
			}
		}
	}
	for k := range nk {
		eng.At(gap(rng, cfg.rate(k, 0), cfg.fixed), clusterEvent{kind: arrival, class: k})
	}
	isDown := func(i int, t time.Duration) bool { return cfg.down != nil && cfg.down(i, t) }
	wasDown := make([]bool, cfg.nodes)
	dispatch := func(i int) {
		n := nodes[i]
		for len(n.running) < cfg.workers && n.s.Len() > 0 {
			r, _ := n.s.Pop(eng.Time())
			if r == nil {
				return
			}
			j := r.Value.(cjob)
			n.running = append(n.running, r)
			eng.After(j.svc, clusterEvent{kind: completion, node: i, r: r})
			addSpan(res.alloc, j.class, eng.Now(), eng.Now()+j.svc)
		}
	}
	var failed error
	eng.RunUntil(cfg.duration, func(ev clusterEvent) {
		now := eng.Now()
		if failed != nil {
			return
		}
		running := -1
		if ev.kind == completion {
			if running = slices.Index(nodes[ev.node].running, ev.r); running < 0 {
				return // lost with its node
			}
		}
		// A node that failed loses its queue and running requests (zero
		// yield) and stops answering polls until it recovers.
		for i, n := range nodes {
			d := isDown(i, now)
			if d && !wasDown[i] {
				n.running = nil
				for n.s.Len() > 0 {
					_, _ = n.s.Pop(eng.Time().Add(cfg.duration + time.Hour)) // drops all
				}
				if i == ev.node && ev.kind == completion {
					return
				}
			}
			wasDown[i] = d
		}
		switch ev.kind {
		case arrival:
			k := ev.class
			eng.At(now+gap(rng, cfg.rate(k, now), cfg.fixed), clusterEvent{kind: arrival, class: k})
			j := cjob{class: k, svc: cfg.service(rng, k)}
			res.offered += cfg.classes[k].Yield.Full
			if p := phaseOf(eng.Time()); p >= 0 {
				res.phaseOffered[p] += cfg.classes[k].Yield.Full
			}
			addSpan(res.demand, k, now, now+j.svc)
			used[k] += j.svc.Seconds()
			var cand []string
			for i, n := range nodes {
				if !isDown(i, now) && (cfg.scheme == classAware || n.serves[k] > 0) {
					cand = append(cand, ids[i])
				}
			}
			if len(cand) == 0 {
				return // no server for the class: lost
			}
			plan := pol.Plan(eng.Time(), cand)
			loads := make([]balance.Load, 0, len(plan.Poll))
			for _, id := range plan.Poll {
				i, _ := strconv.Atoi(id)
				n := nodes[i]
				q := len(n.running) + n.s.ClassLen(cfg.classes[k].Name)
				if cfg.scheme == partitioning {
					q = len(n.running) + n.s.Len()
				}
				loads = append(loads, balance.Load{Replica: id, Queue: q})
			}
			choice := pol.Choose(eng.Time(), cand, loads)
			pol.Sent(eng.Time(), choice)
			i, _ := strconv.Atoi(choice)
			nodes[i].s.Push(eng.Time(), &sched.Request{Class: cfg.classes[k].Name, Arrival: eng.Time(), Value: j})
			dispatch(i)
		case completion:
			n := nodes[ev.node]
			n.running = slices.Delete(n.running, running, running+1)
			jb := ev.r.Value.(cjob)
			n.s.Finish(eng.Time(), ev.r, jb.svc)
			y := cfg.classes[jb.class].Yield.At(eng.Time().Sub(ev.r.Arrival))
			res.realized += y
			if p := phaseOf(ev.r.Arrival); p >= 0 {
				res.phaseRealized[p] += y
			}
			dispatch(ev.node)
		case repartitionDue:
			eng.At(now+cfg.interval, clusterEvent{kind: repartitionDue})
			if err := repartition(now); err != nil {
				failed = err
				return
			}
			for i := range nodes {
				dispatch(i)
			}
		}
	})
	// Requests still running or queued at the end earn nothing in either
	// scheme; both see the same arrivals, so the comparison is fair.
	return res, failed
}

// gap is the time to the next arrival at rate.
func gap(rng *rand.Rand, rate float64, fixed bool) time.Duration {
	if rate <= 0 {
		return time.Hour
	}
	if fixed {
		return seconds(1 / rate)
	}
	return seconds(rng.ExpFloat64() / rate)
}

// partition is the dissertation's server-partitioning rule: demand d[k]
// (servers) is met in full when the total fits in n servers, the rest
// shared in proportion to demand; under overload each class first gets
// min(demand, guarantee·n), then the rest goes by full yield per unit of
// resource, highest first, up to each class's demand.
func partition(d []float64, classes []sched.ClassConfig, cost []float64, n float64) []float64 {
	nk := len(d)
	alloc := make([]float64, nk)
	total := 0.0
	for _, v := range d {
		total += v
	}
	if total <= n {
		for k := range nk {
			alloc[k] = d[k]
			if total > 0 {
				alloc[k] += (n - total) * d[k] / total
			} else {
				alloc[k] = n / float64(nk)
			}
		}
		return alloc
	}
	left := n
	for k := range nk {
		alloc[k] = min(d[k], classes[k].Guarantee*n)
		left -= alloc[k]
	}
	order := make([]int, nk)
	for k := range order {
		order[k] = k
	}
	slices.SortFunc(order, func(a, b int) int {
		pa, pb := classes[a].Yield.Full/cost[a], classes[b].Yield.Full/cost[b]
		switch {
		case pa > pb:
			return -1
		case pa < pb:
			return 1
		}
		return 0
	})
	for _, k := range order {
		add := min(left, d[k]-alloc[k])
		alloc[k] += add
		left -= add
	}
	return alloc
}

// assign gives each class floor(alloc) dedicated servers and puts the
// fractions on a shared pool, whose servers schedule the sharing classes
// with guarantees in proportion to their fractions. Every server gets a
// fresh scheduler, and its queued requests move to it; running requests
// finish where they are (the simulator counts their yield itself).
func assign(nodes []*cnode, alloc []float64, cfg clusterConfig) error {
	nk := len(alloc)
	i := 0
	frac := make([]float64, nk)
	for k, a := range alloc {
		whole := int(math.Floor(a + 1e-9))
		for range whole {
			if i == len(nodes) {
				break
			}
			setServes(nodes[i], k, nk)
			i++
		}
		frac[k] = a - float64(whole)
	}
	shared := nodes[i:]
	sum := 0.0
	for _, f := range frac {
		sum += f
	}
	for _, n := range shared {
		for k := range nk {
			n.serves[k] = 0
			if sum > 0 {
				n.serves[k] = frac[k] / sum
			}
		}
	}
	for _, n := range nodes {
		cls := slices.Clone(cfg.classes)
		for k := range cls {
			cls[k].Guarantee = 0
			if slices.Contains(shared, n) {
				cls[k].Guarantee = n.serves[k] * 0.999
			}
		}
		s, err := sched.NewClassScheduler(sched.Config{Classes: cls})
		if err != nil {
			return fmt.Errorf("schedsim: partition scheduler: %w", err)
		}
		if n.s != nil { // keep the queued requests across the repartition
			for n.s.Len() > 0 {
				r, _ := n.s.Pop(time.Unix(0, 0))
				if r == nil {
					break
				}
				s.Push(r.Arrival, &sched.Request{Class: r.Class, Arrival: r.Arrival, Value: r.Value})
			}
		}
		n.s = s
	}
	return nil
}

func setServes(n *cnode, k, nk int) {
	for j := range nk {
		n.serves[j] = 0
	}
	n.serves[k] = 1
}

// phaseAt is the index of the phase, of those starting at starts
// (ascending), that t falls in; -1 before the first.
func phaseAt(starts []time.Duration, t time.Duration) int {
	i, found := slices.BinarySearch(starts, t)
	if !found {
		i--
	}
	return i
}
