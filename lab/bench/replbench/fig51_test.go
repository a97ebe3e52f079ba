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
