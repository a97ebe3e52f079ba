package faults

import (
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/lab/report"
)

// TestLossyVerdicts: the goals can PASS, FAIL (the election storm and the
// throughput collapse issue 28 measured on main) and are INCONCLUSIVE on a
// starved baseline or a short window that met the elections goal.
func TestLossyVerdicts(t *testing.T) {
	lc := DefaultLossyConfig()
	lc.Levels = []int{3}
	cells := func(base, repl, elections int, window time.Duration) []LossyCell {
		var cs []LossyCell
		for r := range 2 {
			cs = append(cs, LossyCell{Level: 0, Round: r, Writes: base, Window: window},
				LossyCell{Level: 3, Round: r, Writes: repl, Window: window, Elections: elections})
		}
		return cs
	}
	for _, tc := range []struct {
		name  string
		cells []LossyCell
		want  []report.Outcome
	}{
		{"healthy", cells(8000, 5000, 0, time.Minute), []report.Outcome{report.Pass, report.Pass}},
		{"storm on main", cells(8052, 962, 40, time.Minute), []report.Outcome{report.Fail, report.Fail}},
		{"one election a minute is allowed", cells(8000, 4000, 1, time.Minute), []report.Outcome{report.Pass, report.Pass}},
		{"two a minute are not", cells(8000, 4000, 2, time.Minute), []report.Outcome{report.Fail, report.Pass}},
		{"starved baseline", cells(100, 300, 0, time.Minute), []report.Outcome{report.Pass, report.Inconclusive}},
		{"a cluster that serves nothing", cells(8000, 10, 0, time.Minute), []report.Outcome{report.Inconclusive, report.Fail}},
		{"short window", cells(1000, 600, 0, 20*time.Second), []report.Outcome{report.Inconclusive, report.Pass}},
		{"short window with a storm", cells(1000, 100, 5, 20*time.Second), []report.Outcome{report.Fail, report.Fail}},
	} {
		got := report.Outcomes(LossyVerdicts(lc, tc.cells))
		if len(got) != len(tc.want) {
			t.Fatalf("%s: %d checks, want %d", tc.name, len(got), len(tc.want))
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: check %d is %v, want %v: %v", tc.name, i, got[i], tc.want[i], LossyVerdicts(lc, tc.cells)[i])
			}
		}
	}
	one := DefaultLossyConfig()
	one.Levels, one.Rounds = []int{3}, 1
	if got := report.Outcomes(LossyVerdicts(one, cells(8000, 5000, 0, time.Minute)[:2])); got[1] != report.Inconclusive {
		t.Errorf("one round judged the throughput %v, want INCONCLUSIVE", got[1])
	}
}
