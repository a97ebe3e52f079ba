package schedsim

import (
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/report"
)

func TestDispatchGoal(t *testing.T) {
	quiet := bench.Starvation{Lag: 100 * time.Microsecond, Pressure: 0.02}
	for _, tc := range []struct {
		name  string
		p99   time.Duration
		extra float64
		st    bench.Starvation
		want  report.Outcome
	}{
		{"fast", 1300 * time.Nanosecond, 0.08, quiet, report.Pass},
		{"slow decisions", 9 * time.Microsecond, 0.08, quiet, report.Fail},
		{"costly per request", 1300 * time.Nanosecond, 3, quiet, report.Fail},
		{"starved process", 1300 * time.Nanosecond, 0.08, bench.Starvation{Lag: 5 * time.Millisecond, Pressure: 0.02}, report.Inconclusive},
		{"busy machine", 9 * time.Microsecond, 0.08, bench.Starvation{Lag: 100 * time.Microsecond, Pressure: 0.6, Others: 0.6}, report.Inconclusive},
	} {
		if got := dispatchGoal(tc.p99, tc.extra, tc.st).Outcome(); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
