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
