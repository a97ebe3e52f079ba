package appsbench

import (
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/report"
)

func TestAdapterGoal(t *testing.T) {
	quiet := bench.Starvation{Lag: 100 * time.Microsecond, Pressure: 0.02}
	for _, tc := range []struct {
		name   string
		pooled float64
		rounds []float64
		st     bench.Starvation
		want   report.Outcome
	}{
		{"within", 1.2, []float64{1.19, 1.22, 1.2}, quiet, report.Pass},
		{"over", 1.5, []float64{1.5, 1.45, 1.55}, quiet, report.Fail},
		{"rounds disagree", 1.28, []float64{1.2, 1.4, 1.25}, quiet, report.Inconclusive},
		{"one round", 1.2, []float64{1.2}, quiet, report.Inconclusive},
		{"busy machine", 1.2, []float64{1.19, 1.22, 1.2}, bench.Starvation{Lag: 100 * time.Microsecond, Pressure: 0.7, Others: 0.7}, report.Inconclusive},
	} {
		if got := adapterGoal(time.Millisecond, tc.pooled, tc.rounds, tc.st).Outcome(); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
