package replbench

import (
	"testing"

	"github.com/neptune-cluster/neptune/lab/cpuquota"
	"github.com/neptune-cluster/neptune/lab/report"
)

func TestFig54Checks(t *testing.T) {
	held := cpuquota.Judgment{}
	for _, c := range []struct {
		name               string
		steady, down, back float64
		cpu                float64
		judge              cpuquota.Judgment
		want               []report.Outcome
	}{
		{"the paper's shape", 1000, 640, 980, 0.15, held, []report.Outcome{report.Pass, report.Pass}},
		{"collapse while down, no recovery", 1000, 300, 700, 0.15, held, []report.Outcome{report.Fail, report.Fail}},
		{"unconfined", 1000, 1400, 1000, 0, held, []report.Outcome{report.Inconclusive, report.Inconclusive}},
		{"starved steady window", 1000, 640, 980, 0.15, cpuquota.Judgment{Starved: true, Reason: "machine 2% idle"}, []report.Outcome{report.Inconclusive, report.Inconclusive}},
	} {
		for i, ch := range fig54Checks(c.steady, c.down, c.back, c.cpu, c.judge) {
			if got := ch.Outcome(); got != c.want[i] {
				t.Errorf("%s, check %d: %v, want %v: %s", c.name, i, got, c.want[i], ch)
			}
		}
	}
}
