package schedsim

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/sched"
)

// randomGuaranteeWorkload draws 2–5 classes with random yields, service
// times and guarantees (summing to at most 0.9) and arrival mixes that
// leave every class overloaded on its own, so each always has demand.
func randomGuaranteeWorkload(rng *rand.Rand) (workload, float64) {
	n := 2 + rng.IntN(4)
	w := workload{name: "random", mix: make([]float64, n)}
	means := make([]float64, n)
	gs := make([]float64, n)
	sum := 0.0
	for k := range n {
		gs[k] = rng.Float64()
		sum += gs[k]
	}
	total := 0.3 + 0.6*rng.Float64()
	for k := range n {
		means[k] = 0.002 + 0.006*rng.Float64()
		w.mix[k] = 1 / float64(n)
		d := seconds(0.5 + 2*rng.Float64())
		var y sched.Yield
		switch rng.IntN(3) {
		case 0:
			y = sched.Throughput(1+9*rng.Float64(), d)
		case 1:
			y = sched.ResponseTime(1+9*rng.Float64(), d)
		default:
			c := 1 + 9*rng.Float64()
			y = sched.Hybrid(c, d/2, c*rng.Float64(), d)
		}
		w.classes = append(w.classes, sched.ClassConfig{Name: string(rune('a' + k)), Yield: y, Guarantee: gs[k] / sum * total})
	}
	// Equal arrival rates: class k's demand is rate·means[k]/workers; the
	// least demanding class alone must exceed the whole node.
	minMean := means[0]
	for _, m := range means {
		w.mean += m / float64(n)
		minMean = min(minMean, m)
	}
	w.service = func(rng *rand.Rand, k int) time.Duration { return seconds(rng.ExpFloat64() * means[k]) }
	return w, 1.2 * float64(n) * w.mean / minMean
}

// Property: under random overloaded arrivals, every class gets at least its
// guarantee minus 2 % of the node's worker time in every 1 s window.
func TestGuaranteesHoldPerSecondUnderRandomArrivals(t *testing.T) {
	seeds := 10
	if testing.Short() {
		seeds = 4
	}
	const workers, window, duration = 16, time.Second, 6 * time.Second
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 7))
		wl, demand := randomGuaranteeWorkload(rng)
		policy := sched.Policy(rng.IntN(4))
		res, err := simulate(simConfig{
			scheduler: sched.Config{Policy: policy}, wl: wl, workers: workers, demand: demand,
			duration: duration, seed: seed, window: window,
		})
		if err != nil {
			t.Fatal(err)
		}
		capacity := float64(workers) * window.Seconds()
		for w, busy := range res.busy[:duration/window] { // later windows drain
			for k, c := range wl.classes {
				got := busy[k].Seconds() / capacity
				if got < c.Guarantee-0.02 {
					t.Errorf("seed %d (%v, %d classes): window %d class %s got %.3f, guarantee %.3f",
						seed, policy, len(wl.classes), w, c.Name, got, c.Guarantee)
				}
			}
		}
	}
}

// Without guarantees the same overload starves some class in some window,
// so the property above is the guarantee rule's doing.
func TestRandomOverloadStarvesWithoutGuarantees(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 7))
	wl, demand := randomGuaranteeWorkload(rng)
	want := make([]float64, len(wl.classes))
	for k := range wl.classes {
		want[k] = wl.classes[k].Guarantee
		wl.classes[k].Guarantee = 0
	}
	res, err := simulate(simConfig{
		scheduler: sched.Config{Policy: sched.Greedy}, wl: wl, workers: 16, demand: demand,
		duration: 10 * time.Second, seed: 1, window: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, busy := range res.busy[:10] {
		for k := range wl.classes {
			if busy[k].Seconds()/16 < want[k]-0.02 {
				return
			}
		}
	}
	t.Fatal("no class fell below its (removed) guarantee: the workload does not exercise guarantees")
}

func TestSimulateIsDeterministicAndConservesRequests(t *testing.T) {
	cfg := simConfig{scheduler: sched.Config{Policy: sched.Adaptive}, wl: microBenchmark(), workers: 2, demand: 1.5, duration: 60 * time.Second, seed: 3}
	a, err := simulate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := simulate(cfg)
	if a.stats.LossPercent() != b.stats.LossPercent() {
		t.Errorf("same seed, different loss: %v vs %v", a.stats.LossPercent(), b.stats.LossPercent())
	}
	for _, c := range a.stats.Classes {
		if c.Arrivals == 0 || c.Arrivals != c.Completions+c.Drops || c.Queued+c.InFlight != 0 {
			t.Errorf("class %s: %d arrivals ≠ %d completions + %d drops (queued %d, in flight %d)",
				c.Name, c.Arrivals, c.Completions, c.Drops, c.Queued, c.InFlight)
		}
	}
}
