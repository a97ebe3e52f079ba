// Package schedsim simulates the class scheduling of dissertation ch. 4 on
// the lab's discrete-event engine: one node whose workers are fed by the
// real sched.ClassScheduler (Figs 4.8–4.10, `neptune sim sched`), and a
// cluster of such nodes behind clients running the real polling policy,
// class-aware versus partitioned (Figs 4.11–4.12, `neptune sim classes`).
package schedsim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/neptune-cluster/neptune/internal/sched"
	"github.com/neptune-cluster/neptune/lab/sim"
)

// workload is a multi-class request stream for the simulator.
type workload struct {
	name    string
	classes []sched.ClassConfig
	// mix is each class's fraction of the arrivals.
	mix []float64
	// service draws a class-k request's service time (= its resource use).
	service func(rng *rand.Rand, k int) time.Duration
	// mean is the mean service time over the mix, in seconds.
	mean float64
	// means are each class's mean service time, in seconds.
	means []float64
}

// threeClasses gives gold, silver and bronze the same yield shape at
// magnitudes 4:2:1, as in both of the dissertation's workloads.
func threeClasses(shape func(c float64) sched.Yield) []sched.ClassConfig {
	return []sched.ClassConfig{
		{Name: "gold", Yield: shape(4)},
		{Name: "silver", Yield: shape(2)},
		{Name: "bronze", Yield: shape(1)},
	}
}

// microBenchmark is §4.5.1's Micro-benchmark with hybrid yields (Fig 4.8):
// exponential service with means 400/200/100 ms, Poisson arrivals, equal
// arrival rates (the dissertation does not give the mix), D = 2 s.
func microBenchmark() workload {
	means := []float64{0.4, 0.2, 0.1}
	return workload{
		name: "micro-hybrid",
		classes: threeClasses(func(c float64) sched.Yield {
			return sched.Hybrid(c, time.Second, c/2, 2*time.Second)
		}),
		mix: []float64{1.0 / 3, 1.0 / 3, 1.0 / 3},
		service: func(rng *rand.Rand, k int) time.Duration {
			return seconds(rng.ExpFloat64() * means[k])
		},
		mean:  (means[0] + means[1] + means[2]) / 3,
		means: means,
	}
}

// allWorkloads are `neptune sim sched`'s workloads in the order it runs
// them: the micro-benchmark, then the search workloads.
func allWorkloads() []workload { return append([]workload{microBenchmark()}, searchWorkloads()...) }

// searchWorkloads are Differentiated-Search-like workloads (Fig 4.9): the
// Ask Jeeves trace is not available, so arrivals are Poisson (its arrival
// intervals have CV ≈ 1) and service times lognormal with the trace's mean
// 248 ms and standard deviation 218 ms for every class; the mix is
// 10/30/60 % gold/silver/bronze, in each of the three yield shapes.
func searchWorkloads() []workload {
	const mean, sd = 0.248, 0.218
	sigma2 := math.Log(1 + sd*sd/(mean*mean))
	mu, sigma := math.Log(mean)-sigma2/2, math.Sqrt(sigma2)
	service := func(rng *rand.Rand, _ int) time.Duration {
		return seconds(math.Exp(mu + sigma*rng.NormFloat64()))
	}
	const d = 2 * time.Second
	shapes := []struct {
		name  string
		shape func(c float64) sched.Yield
	}{
		{"throughput", func(c float64) sched.Yield { return sched.Throughput(c, d) }},
		{"resptime", func(c float64) sched.Yield { return sched.ResponseTime(c, d) }},
		{"hybrid", func(c float64) sched.Yield { return sched.Hybrid(c, d/2, c/2, d) }},
	}
	var ws []workload
	for _, s := range shapes {
		ws = append(ws, workload{
			name:    "search-" + s.name,
			classes: threeClasses(s.shape),
			mix:     []float64{0.1, 0.3, 0.6},
			service: service,
			mean:    mean,
			means:   []float64{mean, mean, mean},
		})
	}
	return ws
}

func seconds(s float64) time.Duration { return time.Duration(s * 1e9) }

// simConfig is one simulated run of a node.
type simConfig struct {
	scheduler sched.Config // its Classes are replaced by the workload's
	wl        workload
	workers   int
	demand    float64       // offered load: arrival rate × mean service / workers
	duration  time.Duration // arrivals stop then; the queue drains
	seed      uint64
	window    time.Duration // > 0 records busy time per class per window
}

type simResult struct {
	stats sched.Stats
	// respSum is the summed response time of each class's completions.
	respSum []time.Duration
	// busy[w][k] is the worker time class k used in window w.
	busy [][]time.Duration
}

type simJob struct {
	class int
	svc   time.Duration
}

// nodeEvent is an arrival, or the completion of r.
type nodeEvent struct {
	arrival bool
	r       *sched.Request
}

// streamNode is the random stream of a node run's arrivals, classes and
// service times.
const streamNode = 0x5eed

// simulate runs one node with cfg.workers workers driving the real
// ClassScheduler on virtual time. Arrivals and service times come from
// their own seeded stream, so every policy sees the same requests.
func simulate(cfg simConfig) (simResult, error) {
	sc := cfg.scheduler
	sc.Classes = cfg.wl.classes
	s, err := sched.NewClassScheduler(sc)
	if err != nil {
		return simResult{}, err
	}
	if cfg.workers < 1 || !(cfg.demand > 0) {
		return simResult{}, fmt.Errorf("schedsim: simulate: need workers ≥ 1 and demand > 0, have %d and %v", cfg.workers, cfg.demand)
	}
	eng := sim.New[nodeEvent](time.Unix(0, 0), cfg.seed)
	rng := eng.Rand(streamNode)
	rate := cfg.demand * float64(cfg.workers) / cfg.wl.mean
	nk := len(cfg.wl.classes)
	res := simResult{respSum: make([]time.Duration, nk)}

	record := func(k int, from, to time.Duration) {
		for from < to {
			w := int(from / cfg.window)
			for len(res.busy) <= w {
				res.busy = append(res.busy, make([]time.Duration, nk))
			}
			end := min(to, time.Duration(w+1)*cfg.window)
			res.busy[w][k] += end - from
			from = end
		}
	}
	busy := 0
	dispatch := func() {
		for busy < cfg.workers && s.Len() > 0 {
			r, _ := s.Pop(eng.Time())
			if r == nil {
				return
			}
			j := r.Value.(simJob)
			busy++
			eng.After(j.svc, nodeEvent{r: r})
			if cfg.window > 0 {
				record(j.class, eng.Now(), eng.Now()+j.svc)
			}
		}
	}
	if first := seconds(rng.ExpFloat64() / rate); first <= cfg.duration {
		eng.At(first, nodeEvent{arrival: true})
	}
	eng.Run(func(ev nodeEvent) {
		now := eng.Now()
		if ev.arrival {
			k := pick(rng, cfg.wl.mix)
			j := simJob{class: k, svc: cfg.wl.service(rng, k)}
			s.Push(eng.Time(), &sched.Request{Class: cfg.wl.classes[k].Name, Arrival: eng.Time(), Value: j})
			if next := now + seconds(rng.ExpFloat64()/rate); next <= cfg.duration {
				eng.At(next, nodeEvent{arrival: true})
			}
		} else {
			busy--
			j := ev.r.Value.(simJob)
			res.respSum[j.class] += eng.Time().Sub(ev.r.Arrival)
			s.Finish(eng.Time(), ev.r, j.svc)
		}
		dispatch()
	})
	res.stats = s.Stats(eng.Time())
	return res, nil
}

// pick draws an index with probabilities mix.
func pick(rng *rand.Rand, mix []float64) int {
	x := rng.Float64()
	for i, p := range mix {
		if x < p {
			return i
		}
		x -= p
	}
	return len(mix) - 1
}
