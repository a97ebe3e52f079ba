package dacbench

import (
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/lab/report"
)

func ms(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }

func treesRow(flat, bin, lat time.Duration, okFlat float64) []dacStats {
	st := func(mean time.Duration, ok float64) dacStats {
		return dacStats{ok: 100, okFrac: ok, thr: 60 * ok, mean: mean, lag: ms(0.1)}
	}
	return []dacStats{st(ms(900), 0.9), st(flat, okFlat), st(bin, 1), st(lat, 1)}
}

func TestTreesVerdict(t *testing.T) {
	for _, tc := range []struct {
		name string
		row  []dacStats
		want report.Outcome
	}{
		{"55% below both", treesRow(ms(400), ms(400), ms(180), 1), report.Pass},
		// The run at 65/s: LAT 34% below Binomial.
		{"34% below Binomial", treesRow(ms(400), ms(300), ms(198), 1), report.Fail},
		// Flat collapsed at the goal's rate: not a baseline to beat.
		{"Flat collapsed", treesRow(ms(400), ms(400), ms(180), 0.3), report.Inconclusive},
		{"no cell at the rate", nil, report.Inconclusive},
	} {
		c := treesVerdict(65, 35, tc.row)
		if c.Outcome() != tc.want {
			t.Errorf("%s: %s", tc.name, c)
		}
		if !strings.Contains(c.Goal, "65/s") {
			t.Errorf("%s: goal does not state its rate: %s", tc.name, c.Goal)
		}
	}
	row := treesRow(ms(400), ms(400), ms(180), 1)
	row[3].okFrac = 0.2 // LAT itself collapsed: its fault
	if c := treesVerdict(65, 35, row); c.Outcome() != report.Fail {
		t.Errorf("LAT collapsed: %s", c)
	}
	row = treesRow(ms(400), ms(400), ms(180), 1)
	row[3].lag = ms(5)
	if c := treesVerdict(65, 35, row); c.Outcome() != report.Inconclusive || !strings.Contains(c.String(), "starved") {
		t.Errorf("starved LAT cell: %s", c)
	}
}

func TestFig20Verdict(t *testing.T) {
	ep := fig20Score{label: "EP+ED", healthy: 44, both: 36}
	healthyNone := fig20Score{label: "None", healthy: 40, both: 20}
	healthyBase := fig20Score{label: "Base", healthy: 42, both: 25}
	if c := fig20Verdict(45, 1.25, ep, healthyNone, healthyBase); c.Outcome() != report.Pass {
		t.Errorf("1.8× and 1.44×: %s", c)
	}
	weak := fig20Score{label: "Base", healthy: 42, both: 32}
	if c := fig20Verdict(45, 1.25, ep, healthyNone, weak); c.Outcome() != report.Fail {
		t.Errorf("1.125× Base: %s", c)
	}
	// The case: None and Base score ~0 even before any node is
	// slow, so the ratio is ∞: INCONCLUSIVE, with the reason.
	dead := []fig20Score{{label: "None", healthy: 0.2, both: 0}, {label: "Base", healthy: 0, both: 0}}
	c := fig20Verdict(45, 1.25, ep, dead...)
	if c.Outcome() != report.Inconclusive || !strings.Contains(c.String(), "baseline None is unhealthy") || !strings.Contains(c.String(), "--fig20-rate") {
		t.Errorf("dead baselines: %s", c)
	}
	starved := healthyNone
	starved.lag = ms(3)
	if c := fig20Verdict(45, 1.25, ep, starved, healthyBase); c.Outcome() != report.Inconclusive {
		t.Errorf("starved None: %s", c)
	}
}

func TestDACGoalConfigValidate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TreesGoal = 0
	if err := cfg.Validate(); err == nil {
		t.Error("zero threshold accepted")
	}
	cfg = DefaultConfig()
	cfg.Fig20Len = 12 * time.Second // its both-slow window would be empty
	if err := cfg.Validate(); err == nil {
		t.Error("12 s Fig 20 accepted")
	}
	cfg = DefaultConfig()
	cfg.TreesGoalRate = -1
	if err := cfg.Validate(); err == nil {
		t.Error("negative goal rate accepted")
	}
}
