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
		{Starvation{Lag: 100 * time.Microsecond, Pressure: 0.05, Others: 0.02}, report.Pass},
		{Starvation{Lag: 100 * time.Microsecond, Pressure: -1, Others: -1}, report.Pass}, // nothing known of the machine
		{Starvation{Lag: 3 * time.Millisecond, Pressure: 0.05, Others: 0.02}, report.Inconclusive},
		// The benchmark's own wake-ups make pressure, not other work.
		{Starvation{Lag: 100 * time.Microsecond, Pressure: 0.8, Others: 0.05}, report.Pass},
		{Starvation{Lag: 100 * time.Microsecond, Pressure: 0.05, Others: 0.5}, report.Inconclusive},
		// Other work unknown: the pressure decides.
		{Starvation{Lag: 100 * time.Microsecond, Pressure: 0.8, Others: -1}, report.Inconclusive},
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
	w := Starvation{Lag: time.Millisecond, Pressure: 0.1, Others: 0.4}.Worse(Starvation{Lag: 2 * time.Microsecond, Pressure: 0.3, Others: 0.1})
	if w.Lag != time.Millisecond || w.Pressure != 0.3 || w.Others != 0.4 {
		t.Errorf("worse: %+v", w)
	}
}
