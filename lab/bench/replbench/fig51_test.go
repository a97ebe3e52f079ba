package replbench

import (
	"math"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/report"
)

func TestPooledFig51Verdict(t *testing.T) {
	quiet := bench.Starvation{Lag: 100 * time.Microsecond, Pressure: 0.02}
	busy := bench.Starvation{Lag: 100 * time.Microsecond, Pressure: 0.5, Others: 0.5}
	for _, tc := range []struct {
		name     string
		n        int
		gm, half float64
		before   bench.Starvation
		want     report.Outcome
	}{
		{"clearly above", 8, 1.02, 0.03, quiet, report.Pass},
		{"clearly below", 8, 0.80, 0.03, quiet, report.Fail},
		{"straddles the goal", 8, 0.91, 0.05, quiet, report.Inconclusive},
		{"one pair", 1, 1.02, 0, quiet, report.Inconclusive},
		{"busy before the start", 8, 1.02, 0.03, busy, report.Inconclusive},
	} {
		if got := pooledFig51(tc.n, math.Log(tc.gm), tc.half, tc.before).Outcome(); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestScaleVerdict(t *testing.T) {
	for _, tc := range []struct {
		name       string
		deg4, deg1 []float64
		starved    []string
		want       report.Outcome
	}{
		{"the paper's shape", []float64{3000, 3100}, []float64{1000, 1050}, nil, report.Pass},
		{"no scale-out", []float64{1200, 1100}, []float64{1000, 1050}, nil, report.Fail},
		{"rounds disagree", []float64{3000, 2000}, []float64{1000, 1000}, nil, report.Inconclusive},
		{"a starved cell", []float64{3000, 3100}, []float64{1000, 1050}, []string{"deg 4 round 1"}, report.Inconclusive},
		{"one round", []float64{3000}, []float64{1000}, nil, report.Inconclusive},
	} {
		if got := scaleVerdict(tc.deg4, tc.deg1, tc.starved).Outcome(); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestNodesVerdict(t *testing.T) {
	s := nodesSeries{level: 2, degree: 2, pct: 10}
	for _, tc := range []struct {
		name         string
		small, large []float64
		starved      []string
		want         report.Outcome
	}{
		{"scales", []float64{100, 110}, []float64{700, 760}, nil, report.Pass},
		{"flat", []float64{100, 110}, []float64{300, 320}, nil, report.Fail},
		{"rounds disagree", []float64{100, 100}, []float64{700, 400}, nil, report.Inconclusive},
		{"a starved cell", []float64{100, 110}, []float64{700, 760}, []string{"8 nodes round 1"}, report.Inconclusive},
		{"one round", []float64{100}, []float64{700}, nil, report.Inconclusive},
	} {
		// 2 → 16 nodes: proportional is 8×, the goal 5.6×.
		if got := nodesVerdict(s, 2, 16, tc.small, tc.large, tc.starved).Outcome(); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
