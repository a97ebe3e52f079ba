package schedbench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune/internal/sched"
	"github.com/neptune-cluster/neptune/lab/sim/schedsim"
)

// The classes section's timeline is Fig 4.12's, in the dissertation's
// seconds (divided by the scale): steady demand, silver's demand tripled,
// steady again, one node killed, the node back.
const (
	spikeFactor = 3
	guarantee   = 0.2 // every class's, as in Fig 4.12
	// partitionInterval is the dissertation's re-division period.
	partitionInterval = 10 * time.Second
	silver            = 1 // the class that spikes
	victim            = 0 // the node killed: gold's first under partitioning
)

// planPhase is one phase of the timeline.
type planPhase struct {
	Name string
	schedsim.ClusterPhase
	To time.Duration
	// Judged phases carry the goal: the spike and the failure.
	Judged bool
}

// failing reports whether a node is down in the phase: its calls may fail
// (to a node just killed, to a class left without a node) without making
// the phase unable to decide.
func (p planPhase) failing() bool { return len(p.Down) > 0 }

// plan is Fig 4.12's timeline for nodes nodes of workers workers: the
// workload's mix at demand (a share of the cluster's derived capacity,
// nodes × workers ÷ the mean service time), silver's rate tripled in the
// spike, the victim down in the failure. Times are the dissertation's
// divided by scale, after a warm-up at the steady demand (none if warm is
// 0), which fresh nodes and a fresh client need.
func plan(wl schedsim.Workload, nodes, workers int, demand, scale float64, warm time.Duration) []planPhase {
	base := demand * float64(nodes*workers) / wl.Mean.Seconds()
	rates := func(spike bool) []float64 {
		r := make([]float64, len(wl.Mix))
		for k, m := range wl.Mix {
			r[k] = base * m
		}
		if spike {
			r[silver] *= spikeFactor
		}
		return r
	}
	at := func(s float64) time.Duration { return warm + time.Duration(s/scale*float64(time.Second)) }
	var ps []planPhase
	if warm > 0 {
		ps = append(ps, planPhase{Name: "warm-up", ClusterPhase: schedsim.ClusterPhase{Rates: rates(false)}, To: warm})
	}
	ps = append(ps, []planPhase{
		{Name: "steady", ClusterPhase: schedsim.ClusterPhase{From: at(0), Rates: rates(false)}, To: at(50)},
		{Name: "spike", ClusterPhase: schedsim.ClusterPhase{From: at(50), Rates: rates(true)}, To: at(150), Judged: true},
		{Name: "calm", ClusterPhase: schedsim.ClusterPhase{From: at(150), Rates: rates(false)}, To: at(200)},
		{Name: "failure", ClusterPhase: schedsim.ClusterPhase{From: at(200), Rates: rates(false), Down: []int{victim}}, To: at(250), Judged: true},
		{Name: "recovered", ClusterPhase: schedsim.ClusterPhase{From: at(250), Rates: rates(false)}, To: at(300)},
	}...)
	return ps
}

// segments are the plan's arrival segments for drawTrace.
func segments(ps []planPhase) []segment {
	segs := make([]segment, len(ps))
	for i, p := range ps {
		total := 0.0
		for _, r := range p.Rates {
			total += r
		}
		mix := make([]float64, len(p.Rates))
		for k, r := range p.Rates {
			mix[k] = r / total
		}
		segs[i] = segment{from: p.From, to: p.To, rate: total, mix: mix}
	}
	return segs
}

// division is which class each node serves under partitioning from From
// on: Owner[i] is node i's class, -1 if it serves none (it is down).
type division struct {
	From  time.Duration
	Owner []int
}

// partitionSchedule emulates the dissertation's periodic partitioning on
// the plan: every interval, at t, the nodes up throughout [t − interval,
// t) are divided among the classes by the rule (schedsim.Partition) on
// the planned demand over that interval (at 0, the first phase's), whole
// nodes only (wholeNodes), the classes in order over the nodes in order.
// The planned demand is what the simulator measures from arrivals, without
// the noise; a failure is seen at the first re-division after it, as in
// the dissertation. Divisions that repeat the one before are left out.
func partitionSchedule(ps []planPhase, classes []sched.ClassConfig, cost []float64, nodes, workers int, interval time.Duration) []division {
	end := ps[len(ps)-1].To
	var out []division
	for t := time.Duration(0); t < end; t += interval {
		demand := make([]float64, len(classes))
		up := slices.Repeat([]bool{true}, nodes)
		for _, p := range ps {
			// The share of [t − interval, t) in p; at 0, the first phase.
			share := (min(p.To, t) - max(p.From, t-interval)).Seconds() / interval.Seconds()
			if t == 0 && p.From == 0 {
				share = 1
			}
			if share <= 0 {
				continue
			}
			for k, r := range p.Rates {
				demand[k] += share * r * cost[k] / float64(workers)
			}
			for _, i := range p.Down {
				up[i] = false
			}
		}
		var live []int
		for i, u := range up {
			if u {
				live = append(live, i)
			}
		}
		alloc := schedsim.Partition(demand, classes, cost, float64(len(live)))
		owner := slices.Repeat([]int{-1}, nodes)
		j := 0
		for k, n := range wholeNodes(alloc, demand, len(live)) {
			for range n {
				owner[live[j]] = k
				j++
			}
		}
		if len(out) == 0 || !slices.Equal(out[len(out)-1].Owner, owner) {
			out = append(out, division{From: t, Owner: owner})
		}
	}
	return out
}

// wholeNodes rounds alloc (servers per class, summing to n) to whole
// nodes by largest remainder, then gives every class with demand at least
// one node, taken from the class with the most: a class without a node
// would lose every request, which no division of the rule intends.
func wholeNodes(alloc, demand []float64, n int) []int {
	out := make([]int, len(alloc))
	left := n
	for k, a := range alloc {
		out[k] = int(math.Floor(a + 1e-9))
		left -= out[k]
	}
	order := make([]int, len(alloc))
	for k := range order {
		order[k] = k
	}
	rem := func(k int) float64 { return alloc[k] - float64(out[k]) }
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(rem(b), rem(a)) })
	for i := 0; left > 0; i++ {
		out[order[i%len(order)]]++
		left--
	}
	for k := range out {
		if out[k] == 0 && demand[k] > 0 {
			most := 0
			for j := range out {
				if out[j] > out[most] {
					most = j
				}
			}
			if out[most] > 1 {
				out[most]--
				out[k]++
			}
		}
	}
	return out
}

// routing is how the client of a scheme addresses the classes: the
// partitions of work each node hosts, and the partition a request goes to.
// Class-aware: every node hosts partition 0 and every class goes there,
// so the client's balancing policy picks among all nodes. Partitioning:
// each distinct division d of the schedule has partitions d·K..d·K+K−1
// (K classes), partition d·K+k hosted by the nodes d gives class k, and a
// request of class k arriving while d holds goes to d·K+k, so the
// policy picks among that class's nodes only. Hosting every division's
// partitions from the start lets the divisions change while the nodes run.
type routing struct {
	divisions []division // nil for class-aware
	ids       []int      // each division's number among the distinct ones
	classes   int
}

func newRouting(divs []division, classes int) routing {
	r := routing{divisions: divs, classes: classes}
	var distinct [][]int
	for _, d := range divs {
		i := slices.IndexFunc(distinct, func(o []int) bool { return slices.Equal(o, d.Owner) })
		if i < 0 {
			i = len(distinct)
			distinct = append(distinct, d.Owner)
		}
		r.ids = append(r.ids, i)
	}
	return r
}

// partition is the partition a request of class arriving at at goes to.
func (r routing) partition(at time.Duration, class int) int {
	if r.divisions == nil {
		return 0
	}
	i := len(r.divisions) - 1
	for i > 0 && r.divisions[i].From > at {
		i--
	}
	return r.ids[i]*r.classes + class
}

// partitions lists every partition the routing sends to.
func (r routing) partitions() []int {
	if r.divisions == nil {
		return []int{0}
	}
	var ps []int
	for i, d := range r.divisions {
		for k := range r.classes {
			if slices.Contains(d.Owner, k) {
				ps = append(ps, r.ids[i]*r.classes+k)
			}
		}
	}
	slices.Sort(ps)
	return slices.Compact(ps)
}

// hosted lists the partitions node hosts, as the config's partitions key
// takes them ("0,3,5").
func (r routing) hosted(node int) string {
	if r.divisions == nil {
		return "0"
	}
	var ps []int
	for i, d := range r.divisions {
		if k := d.Owner[node]; k >= 0 {
			ps = append(ps, r.ids[i]*r.classes+k)
		}
	}
	slices.Sort(ps)
	ps = slices.Compact(ps)
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

// describe states a schedule: each division's time and nodes per class.
func describe(divs []division, classes []sched.ClassConfig) string {
	var parts []string
	for _, d := range divs {
		n := make([]string, len(classes))
		for k := range classes {
			c := 0
			for _, o := range d.Owner {
				if o == k {
					c++
				}
			}
			n[k] = strconv.Itoa(c)
		}
		parts = append(parts, fmt.Sprintf("from %v %s", d.From.Round(time.Millisecond), strings.Join(n, "/")))
	}
	return strings.Join(parts, ", ")
}
