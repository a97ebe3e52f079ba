package bench

import (
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/lab/report"
)

func TestStarvationDoubts(t *testing.T) {
	for _, tc := range []struct {
		s    Starvation
		want report.Outcome
	}{
		{Starvation{Lag: 100 * time.Microsecond, Pressure: 0.05}, report.Pass},
		{Starvation{Lag: 100 * time.Microsecond, Pressure: -1}, report.Pass}, // pressure unknown
		{Starvation{Lag: 3 * time.Millisecond, Pressure: 0.05}, report.Inconclusive},
		{Starvation{Lag: 100 * time.Microsecond, Pressure: 0.8}, report.Inconclusive},
	} {
		c := tc.s.Doubt(report.AtMost("x ≤ 1", 0.5, 1, "0.5"), "the sequential cells")
		if c.Outcome() != tc.want {
			t.Errorf("%+v: %s", tc.s, c)
		}
		// A starved cell that missed the goal is no FAIL either.
		if c := tc.s.Doubt(report.AtMost("x ≤ 1", 2, 1, "2"), "the sequential cells"); tc.want == report.Inconclusive && c.Outcome() != report.Inconclusive {
			t.Errorf("%+v, missed: %s", tc.s, c)
		}
	}
	w := Starvation{Lag: time.Millisecond, Pressure: 0.1}.Worse(Starvation{Lag: 2 * time.Microsecond, Pressure: 0.3})
	if w.Lag != time.Millisecond || w.Pressure != 0.3 {
		t.Errorf("worse: %+v", w)
	}
}
