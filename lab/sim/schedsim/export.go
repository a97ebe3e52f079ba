package schedsim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/neptune-cluster/neptune/internal/sched"
)

// Workload is one of `neptune sim sched`'s workloads with every time in
// it, service times and yield deadlines alike, divided by a scale, so a
// benchmark on a real node (lab/bench/schedbench) runs the same requests
// faster and can put the simulator's figure for the same point beside its
// own (SimulateLoss).
type Workload struct {
	// Name is the simulator's name: micro-hybrid, search-throughput,
	// search-resptime or search-hybrid.
	Name string
	// Scale is what the dissertation's times were divided by.
	Scale float64
	// Classes are gold, silver and bronze with their scaled yields.
	Classes []sched.ClassConfig
	// Mix is each class's share of the arrivals.
	Mix []float64
	// Mean is the mean scaled service time over the mix.
	Mean time.Duration
	// Means are each class's mean scaled service time.
	Means []time.Duration

	wl workload
}

// WorkloadNames are the names ScaledWorkload takes, the micro-benchmark
// first.
func WorkloadNames() []string {
	var names []string
	for _, w := range allWorkloads() {
		names = append(names, w.name)
	}
	return names
}

// ScaledWorkload returns the workload name with its times divided by
// scale (> 0).
func ScaledWorkload(name string, scale float64) (Workload, error) {
	if !(scale > 0) {
		return Workload{}, fmt.Errorf("schedsim: scale %v, want > 0", scale)
	}
	i := slices.Index(WorkloadNames(), name)
	if i < 0 {
		return Workload{}, fmt.Errorf("schedsim: no workload %q (want one of %v)", name, WorkloadNames())
	}
	w := allWorkloads()[i]
	div := func(d time.Duration) time.Duration { return time.Duration(float64(d) / scale) }
	classes := slices.Clone(w.classes)
	for k := range classes {
		y := &classes[k].Yield
		y.PreDeadline, y.Deadline = div(y.PreDeadline), div(y.Deadline)
	}
	service := w.service
	w.classes, w.mean = classes, w.mean/scale
	w.service = func(rng *rand.Rand, k int) time.Duration { return div(service(rng, k)) }
	out := Workload{Name: w.name, Scale: scale, Classes: classes, Mix: slices.Clone(w.mix), Mean: seconds(w.mean), wl: w}
	for _, m := range w.means {
		out.Means = append(out.Means, seconds(m/scale))
	}
	return out, nil
}

// Class draws a request's class from rng by the mix, as the simulator's
// arrivals do.
func (w Workload) Class(rng *rand.Rand) int { return pick(rng, w.Mix) }

// Service draws a class-k request's scaled service time from rng.
func (w Workload) Service(rng *rand.Rand, k int) time.Duration { return w.wl.service(rng, k) }

// SimulateLoss is the simulator's LossPercent for w under policy p on a
// node of workers workers at demand (arrival rate × mean service ÷
// workers) with arrivals for duration from seed: the figure `neptune sim
// sched` draws, at w's scale, with the scheduler's defaults.
func SimulateLoss(w Workload, p sched.Policy, workers int, demand float64, duration time.Duration, seed uint64) (float64, error) {
	res, err := simulate(simConfig{scheduler: sched.Config{Policy: p}, wl: w.wl, workers: workers, demand: demand, duration: duration, seed: seed})
	if err != nil {
		return 0, err
	}
	return res.stats.LossPercent(), nil
}

// Partition is the dissertation's server-partitioning rule (§4.5.3) as
// `neptune sim classes` applies it: demand[k] (in servers) met in full
// when the total fits in servers, the rest shared in proportion to
// demand; under overload each class first gets min(demand, guarantee ×
// servers), then the rest goes by full yield per unit of cost, highest
// first. Bench sched's partitioning contender divides its nodes with it.
func Partition(demand []float64, classes []sched.ClassConfig, cost []float64, servers float64) []float64 {
	return partition(demand, classes, cost, servers)
}

// ClusterPhase is one stretch of a cluster timeline such as Fig 4.12's:
// from From on, class k arrives at Rates[k] requests per second
// (Poisson) and the nodes numbered in Down are down.
type ClusterPhase struct {
	From  time.Duration
	Rates []float64
	Down  []int
}

// SimulatePhases is the simulator's figure for a cluster timeline: phases
// (From ascending, the first at 0) run until end on nodes nodes of
// workers workers, every node running w's classes (guarantees included)
// under the scheduler's defaults, the client the polling policy, with
// class-aware distribution or (partitioned) `neptune sim classes`'
// periodic partitioning, its 10 s interval divided by w's scale. It
// returns each phase's offered and realized yield, by arrival time;
// requests still queued at end are given their deadline to finish.
func SimulatePhases(w Workload, partitioned bool, nodes, workers int, phases []ClusterPhase, end time.Duration, seed uint64) (offered, realized []float64, err error) {
	if len(phases) == 0 || phases[0].From != 0 {
		return nil, nil, fmt.Errorf("schedsim: phases must start at 0, got %d", len(phases))
	}
	var grace time.Duration
	starts := make([]time.Duration, len(phases))
	for i, p := range phases {
		starts[i] = p.From
	}
	at := func(t time.Duration) ClusterPhase { return phases[phaseAt(starts, t)] }
	for _, c := range w.Classes {
		grace = max(grace, c.Yield.Deadline)
	}
	cost := make([]float64, len(w.Means))
	for k, m := range w.Means {
		cost[k] = m.Seconds()
	}
	cfg := clusterConfig{
		scheme: classAware, nodes: nodes, workers: workers, classes: w.Classes, cost: cost,
		rate: func(k int, t time.Duration) float64 {
			if t >= end {
				return 0
			}
			return at(t).Rates[k]
		},
		service:  w.wl.service,
		down:     func(i int, t time.Duration) bool { return t < end && slices.Contains(at(t).Down, i) },
		interval: time.Duration(float64(10*time.Second) / w.Scale),
		window:   time.Second, duration: end + grace, seed: seed, phases: starts,
	}
	if partitioned {
		cfg.scheme = partitioning
	}
	res, err := simulateCluster(cfg)
	return res.phaseOffered, res.phaseRealized, err
}
