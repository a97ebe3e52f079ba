package schedsim

import (
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/sched"
)

func TestPartitionRule(t *testing.T) {
	classes := []sched.ClassConfig{
		{Name: "gold", Yield: sched.Throughput(4, time.Second), Guarantee: 0.2},
		{Name: "silver", Yield: sched.Throughput(2, time.Second), Guarantee: 0.2},
		{Name: "bronze", Yield: sched.Throughput(1, time.Second), Guarantee: 0.2},
	}
	cost := []float64{1, 1, 1}
	tests := []struct {
		name   string
		demand []float64
		want   []float64
	}{
		{"underload shares the rest by demand", []float64{1, 3, 4}, []float64{2, 6, 8}},
		{"overload: guarantees, then by yield per cost", []float64{2, 12, 10}, []float64{2, 10.8, 3.2}},
		{"demand below guarantee keeps only demand", []float64{1, 20, 1}, []float64{1, 14, 1}},
	}
	for _, tt := range tests {
		got := partition(tt.demand, classes, cost, 16)
		for k := range got {
			if d := got[k] - tt.want[k]; d > 1e-9 || d < -1e-9 {
				t.Errorf("%s: partition(%v) = %v, want %v", tt.name, tt.demand, got, tt.want)
				break
			}
		}
	}
}

// TestClassAwareBeatsPartitioningUnderOverload runs both schemes on the
// same arrivals at 200 % demand: spreading every class over every node
// must earn more yield than confining each class to its servers.
func TestClassAwareBeatsPartitioningUnderOverload(t *testing.T) {
	yield := map[scheme]float64{}
	for _, sc := range []scheme{classAware, partitioning} {
		cfg := clusterWorkload(searchWorkloads()[2], 4, 2, 2)
		cfg.scheme, cfg.duration, cfg.seed = sc, 60*time.Second, 1
		res, err := simulateCluster(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.realized <= 0 || res.realized > res.offered {
			t.Fatalf("%v: realized %v of offered %v", sc, res.realized, res.offered)
		}
		yield[sc] = res.realized
	}
	if yield[classAware] < 1.06*yield[partitioning] {
		t.Errorf("class-aware yield %.0f, partitioning %.0f: want ≥ 6%% more", yield[classAware], yield[partitioning])
	}
}

// TestSimulatePhases: a phase's offered yield is its arrivals', and
// partitioning loses gold when its only server fails until the next
// re-division, where class-aware barely notices.
func TestSimulatePhases(t *testing.T) {
	w, err := ScaledWorkload("search-hybrid", 10)
	if err != nil {
		t.Fatal(err)
	}
	for k := range w.Classes {
		w.Classes[k].Guarantee = 0.2
	}
	const nodes, workers = 8, 2
	base := 0.8 * nodes * workers / w.Mean.Seconds()
	rates := []float64{base * 0.1, base * 0.3, base * 0.6}
	phases := []ClusterPhase{{From: 0, Rates: rates}, {From: 10 * time.Second, Rates: rates, Down: []int{0}}}
	end := 20 * time.Second
	loss := map[bool][]float64{}
	for _, part := range []bool{false, true} {
		off, real, err := SimulatePhases(w, part, nodes, workers, phases, end, 1)
		if err != nil {
			t.Fatal(err)
		}
		// Offered: 10 s of arrivals at base, mean full yield 4·0.1+2·0.3+1·0.6 = 1.6.
		for i := range phases {
			if want := 10 * base * 1.6; off[i] < 0.9*want || off[i] > 1.1*want {
				t.Errorf("partitioned %t, phase %d: offered %.0f, want about %.0f", part, i, off[i], want)
			}
			if real[i] <= 0 || real[i] > off[i] {
				t.Errorf("partitioned %t, phase %d: realized %.0f of %.0f", part, i, real[i], off[i])
			}
			loss[part] = append(loss[part], sched.LossPercent(off[i], real[i]))
		}
	}
	if loss[false][1] > loss[true][1] {
		t.Errorf("with a node down, class-aware lost %.2f%%, partitioning %.2f%%: want class-aware at most", loss[false][1], loss[true][1])
	}
	if _, _, err := SimulatePhases(w, false, nodes, workers, phases[1:], end, 1); err == nil {
		t.Error("phases not starting at 0 accepted")
	}
}
