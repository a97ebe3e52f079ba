package sched

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// workload is a multi-class request stream for the simulator.
type workload struct {
	name    string
	classes []ClassConfig
	// mix is each class's fraction of the arrivals.
	mix []float64
	// service draws a class-k request's service time (= its resource use).
	service func(rng *rand.Rand, k int) time.Duration
	// mean is the mean service time over the mix, in seconds.
	mean float64
}

// threeClasses gives gold, silver and bronze the same yield shape at
// magnitudes 4:2:1, as in both of the dissertation's workloads.
func threeClasses(shape func(c float64) Yield) []ClassConfig {
	return []ClassConfig{
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
		classes: threeClasses(func(c float64) Yield {
			return Hybrid(c, time.Second, c/2, 2*time.Second)
		}),
		mix: []float64{1.0 / 3, 1.0 / 3, 1.0 / 3},
		service: func(rng *rand.Rand, k int) time.Duration {
			return seconds(rng.ExpFloat64() * means[k])
		},
		mean: (means[0] + means[1] + means[2]) / 3,
	}
}

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
		shape func(c float64) Yield
	}{
		{"throughput", func(c float64) Yield { return Throughput(c, d) }},
		{"resptime", func(c float64) Yield { return ResponseTime(c, d) }},
		{"hybrid", func(c float64) Yield { return Hybrid(c, d/2, c/2, d) }},
	}
	var ws []workload
	for _, s := range shapes {
		ws = append(ws, workload{
			name:    "search-" + s.name,
			classes: threeClasses(s.shape),
			mix:     []float64{0.1, 0.3, 0.6},
			service: service,
			mean:    mean,
		})
	}
	return ws
}

func seconds(s float64) time.Duration { return time.Duration(s * 1e9) }

// simConfig is one simulated run of a node.
type simConfig struct {
	sched    Config // its Classes are replaced by the workload's
	wl       workload
	workers  int
	demand   float64       // offered load: arrival rate × mean service / workers
	duration time.Duration // arrivals stop then; the queue drains
	seed     uint64
	window   time.Duration // > 0 records busy time per class per window
}

type simResult struct {
	stats Stats
	// respSum is the summed response time of each class's completions.
	respSum []time.Duration
	// busy[w][k] is the worker time class k used in window w.
	busy [][]time.Duration
}

type simJob struct {
	class int
	svc   time.Duration
}

// simulate runs one node with cfg.workers workers driving the real
// ClassScheduler on virtual time. Arrivals and service times come from
// their own seeded stream, so every policy sees the same requests.
func simulate(cfg simConfig) (simResult, error) {
	sc := cfg.sched
	sc.Classes = cfg.wl.classes
	s, err := NewClassScheduler(sc)
	if err != nil {
		return simResult{}, err
	}
	if cfg.workers < 1 || !(cfg.demand > 0) {
		return simResult{}, fmt.Errorf("sched: simulate: need workers ≥ 1 and demand > 0, have %d and %v", cfg.workers, cfg.demand)
	}
	rng := rand.New(rand.NewPCG(cfg.seed, 0x5eed))
	rate := cfg.demand * float64(cfg.workers) / cfg.wl.mean
	base := time.Unix(0, 0)
	nk := len(cfg.wl.classes)
	res := simResult{respSum: make([]time.Duration, nk)}

	type running struct {
		r   *Request
		end time.Duration
	}
	var busy []running
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
	dispatch := func(now time.Duration) {
		for len(busy) < cfg.workers && s.Len() > 0 {
			r, _ := s.Pop(base.Add(now))
			if r == nil {
				return
			}
			j := r.Value.(simJob)
			busy = append(busy, running{r, now + j.svc})
			if cfg.window > 0 {
				record(j.class, now, now+j.svc)
			}
		}
	}
	nextArrival := seconds(rng.ExpFloat64() / rate)
	var last time.Duration
	for {
		first := -1
		for i, b := range busy {
			if first < 0 || b.end < busy[first].end {
				first = i
			}
		}
		switch {
		case nextArrival <= cfg.duration && (first < 0 || nextArrival <= busy[first].end):
			now := nextArrival
			last = now
			k := pick(rng, cfg.wl.mix)
			j := simJob{class: k, svc: cfg.wl.service(rng, k)}
			s.Push(base.Add(now), &Request{Class: cfg.wl.classes[k].Name, Arrival: base.Add(now), Value: j})
			nextArrival += seconds(rng.ExpFloat64() / rate)
			dispatch(now)
		case first >= 0:
			b := busy[first]
			busy[first] = busy[len(busy)-1]
			busy = busy[:len(busy)-1]
			last = b.end
			j := b.r.Value.(simJob)
			res.respSum[j.class] += b.end - b.r.Arrival.Sub(base)
			s.Finish(base.Add(b.end), b.r, j.svc)
			dispatch(b.end)
		default:
			res.stats = s.Stats(base.Add(last))
			return res, nil
		}
	}
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
