package schedsim

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/sched"
)

func TestScaledWorkloadDividesEveryTime(t *testing.T) {
	if _, err := ScaledWorkload("nope", 10); err == nil {
		t.Error("an unknown workload accepted")
	}
	if _, err := ScaledWorkload("micro-hybrid", 0); err == nil {
		t.Error("scale 0 accepted")
	}
	for _, name := range WorkloadNames() {
		one, err := ScaledWorkload(name, 1)
		if err != nil {
			t.Fatal(err)
		}
		ten, err := ScaledWorkload(name, 10)
		if err != nil {
			t.Fatal(err)
		}
		near := func(a, b time.Duration) bool { return math.Abs(float64(a-10*b)) <= 10 }
		if !near(one.Mean, ten.Mean) || len(ten.Means) != 3 {
			t.Errorf("%s: mean %v at scale 1, %v at 10", name, one.Mean, ten.Mean)
		}
		for k := range one.Classes {
			a, b := one.Classes[k].Yield, ten.Classes[k].Yield
			if !near(a.Deadline, b.Deadline) || !near(a.PreDeadline, b.PreDeadline) || a.Full != b.Full || a.Penalty != b.Penalty || !near(one.Means[k], ten.Means[k]) {
				t.Errorf("%s class %d: %+v at scale 1, %+v at 10", name, k, a, b)
			}
		}
		r1, r10 := rand.New(rand.NewPCG(1, 2)), rand.New(rand.NewPCG(1, 2))
		for range 100 {
			if a, b := one.Service(r1, 0), ten.Service(r10, 0); !near(a, b) {
				t.Fatalf("%s: service %v at scale 1, %v at 10", name, a, b)
			}
		}
	}
	// Unscaled, the loss is the simulator's own.
	w, _ := ScaledWorkload("micro-hybrid", 1)
	got, err := SimulateLoss(w, sched.Greedy, 2, 1.5, 60*time.Second, 1)
	if err != nil {
		t.Fatal(err)
	}
	res, err := simulate(simConfig{scheduler: sched.Config{Policy: sched.Greedy}, wl: microBenchmark(), workers: 2, demand: 1.5, duration: 60 * time.Second, seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := res.stats.LossPercent(); got != want {
		t.Errorf("SimulateLoss %v, simulate %v", got, want)
	}
}
