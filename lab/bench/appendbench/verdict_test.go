package appendbench

import (
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/report"
)

func TestAppendVerdicts(t *testing.T) {
	quiet := bench.Starvation{Lag: 100 * time.Microsecond, Pressure: 0.02}
	busy := bench.Starvation{Lag: 100 * time.Microsecond, Pressure: 0.6, Others: 0.6}
	good := &Result{Appends: 150_000, Kills: 23}
	for _, tc := range []struct {
		name          string
		res           *Result
		clean         bool
		with, without float64
		rounds        []bool
		before        bench.Starvation
		want          []report.Outcome
	}{
		{"quiet and clean", good, true, 2900, 3000, []bool{true, true, true}, quiet, []report.Outcome{report.Pass, report.Pass}},
		{"a duplicate", good, false, 2900, 3000, []bool{true, true, true}, quiet, []report.Outcome{report.Fail, report.Pass}},
		{"too few kills", &Result{Appends: 150_000, Kills: 5}, true, 2900, 3000, []bool{true, true}, quiet, []report.Outcome{report.Fail, report.Pass}},
		{"identities cost 10%", good, true, 2700, 3000, []bool{false, false, false}, quiet, []report.Outcome{report.Pass, report.Fail}},
		{"rounds disagree", good, true, 2800, 3000, []bool{true, false, false}, quiet, []report.Outcome{report.Pass, report.Inconclusive}},
		// Other work on the machine makes the cost undecidable, never
		// exactly-once: a duplicate is a duplicate under any load.
		{"busy machine", good, false, 2900, 3000, []bool{true, true, true}, busy, []report.Outcome{report.Fail, report.Inconclusive}},
		{"no rounds", good, true, 0, 0, nil, quiet, []report.Outcome{report.Pass}},
	} {
		got := report.Outcomes(verdicts(tc.res, tc.clean, tc.with, tc.without, tc.rounds, tc.before))
		if len(got) != len(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
				break
			}
		}
	}
}
