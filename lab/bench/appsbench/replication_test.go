package appsbench

import (
	"math"
	"strings"
	"testing"

	"github.com/neptune-cluster/neptune/lab/report"
)

const confinedCPU = 0.15

func TestScaleVerdict(t *testing.T) {
	lo, hi := appCell{"auction", 4, 2}, appCell{"auction", 8, 2}
	for _, tc := range []struct {
		name         string
		small, large []float64
		starved      []string
		cpu          float64
		want         report.Outcome
	}{
		// 4 → 8 nodes: proportional is 2×, the goal 1.4×.
		{"scales", []float64{100, 110}, []float64{190, 200}, nil, confinedCPU, report.Pass},
		{"flat", []float64{100, 110}, []float64{110, 120}, nil, confinedCPU, report.Fail},
		{"rounds disagree", []float64{100, 100}, []float64{190, 120}, nil, confinedCPU, report.Inconclusive},
		{"a starved cell", []float64{100, 110}, []float64{190, 200}, []string{"8 nodes round 1"}, confinedCPU, report.Inconclusive},
		{"one round", []float64{100}, []float64{190}, nil, confinedCPU, report.Inconclusive},
		{"in-process nodes", []float64{100, 110}, []float64{190, 200}, nil, 0, report.Inconclusive},
	} {
		if got := scaleVerdict(lo, hi, tc.small, tc.large, tc.starved, tc.cpu).Outcome(); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAuctionDegreeVerdict(t *testing.T) {
	for _, tc := range []struct {
		name       string
		deg4, deg1 []float64
		starved    []string
		cpu        float64
		want       report.Outcome
	}{
		{"small overhead", []float64{800, 820}, []float64{1000, 1010}, nil, confinedCPU, report.Pass},
		{"large overhead", []float64{400, 420}, []float64{1000, 1010}, nil, confinedCPU, report.Fail},
		{"rounds disagree", []float64{800, 500}, []float64{1000, 1000}, nil, confinedCPU, report.Inconclusive},
		{"a starved cell", []float64{800, 820}, []float64{1000, 1010}, []string{"degree 1 round 2"}, confinedCPU, report.Inconclusive},
		{"in-process nodes", []float64{800, 820}, []float64{1000, 1010}, nil, 0, report.Inconclusive},
	} {
		if got := auctionDegreeVerdict(8, tc.deg4, tc.deg1, tc.starved, tc.cpu).Outcome(); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestContrastVerdict(t *testing.T) {
	d1 := []float64{1000, 1000}
	for _, tc := range []struct {
		name     string
		a4, p4   []float64
		starved  []string
		cpu      float64
		want     report.Outcome
		contains string
	}{
		{"the paper's contrast", []float64{800, 780}, []float64{400, 420}, nil, confinedCPU, report.Pass, "auction 0.79, pcache 0.41"},
		{"reversed", []float64{400, 420}, []float64{800, 780}, nil, confinedCPU, report.Fail, ""},
		{"rounds disagree", []float64{800, 400}, []float64{600, 600}, nil, confinedCPU, report.Inconclusive, ""},
		{"a starved cell", []float64{800, 780}, []float64{400, 420}, []string{"pcache degree 4 round 1"}, confinedCPU, report.Inconclusive, ""},
		{"in-process nodes", []float64{800, 780}, []float64{400, 420}, nil, 0, report.Inconclusive, ""},
	} {
		c := contrastVerdict(8, tc.a4, d1, tc.p4, d1, tc.starved, tc.cpu)
		if got := c.Outcome(); got != tc.want {
			t.Errorf("%s: %v, want %v (%s)", tc.name, got, tc.want, c)
		}
		if !strings.HasPrefix(c.Measured, tc.contains) {
			t.Errorf("%s: measured %q, want it to start %q", tc.name, c.Measured, tc.contains)
		}
	}
}

// The checks a run gets depend on its cells: a scale check per line with
// two node counts, and the degree checks only with degrees 1 and 4 at 4
// nodes or more.
func TestAppChecks(t *testing.T) {
	samples := map[appCell][]float64{}
	for _, svc := range []string{"auction", "pcache"} {
		for _, n := range []int{2, 4} {
			for d := 1; d <= n; d++ {
				samples[appCell{svc, n, d}] = []float64{100, 100}
			}
		}
	}
	checks := appChecks(samples, nil, []int{2, 4}, []int{1, 2, 3, 4}, confinedCPU)
	// degrees 1 and 2 of each service on 2 and 4 nodes, then the two
	// degree checks at 4 nodes.
	if len(checks) != 6 {
		t.Fatalf("%d checks, want 6:\n%v", len(checks), checks)
	}
	if got := appChecks(samples, nil, []int{4}, []int{1, 2}, confinedCPU); len(got) != 0 {
		t.Errorf("one node count without degree 4: %d checks, want none: %v", len(got), got)
	}
}

// TestWriteCostInvertsTheModel: a write as costly as a read (x = 1) at 13%
// writes and degree 4 leaves 1/(0.87+4×0.13) of degree 1, and the model
// gives back x = 1 from that ratio; costlier writes read as costlier.
func TestWriteCostInvertsTheModel(t *testing.T) {
	ratio := (0.87 + 0.13) / (0.87 + 4*0.13)
	if x := writeCost(0.13, 4, 1/ratio); math.Abs(x-1) > 1e-9 {
		t.Errorf("writeCost at the x=1 ratio %.3f = %v, want 1", ratio, x)
	}
	if cheap, dear := writeCost(0.13, 4, 1/0.65), writeCost(0.13, 4, 1/0.31); !(cheap < 1.5 && dear > 15) {
		t.Errorf("writeCost at 0.65× = %.2f (want < 1.5), at 0.31× = %.2f (want > 15)", cheap, dear)
	}
}
