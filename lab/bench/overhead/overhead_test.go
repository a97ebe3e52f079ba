package overhead

import (
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/report"
)

func TestPollVerdict(t *testing.T) {
	us := time.Microsecond
	for _, tc := range []struct {
		name   string
		cost   time.Duration
		rounds []time.Duration
		lag    time.Duration
		want   report.Outcome
	}{
		{"fast", 20 * us, []time.Duration{15 * us, 25 * us, 20 * us}, 100 * us, report.Pass},
		// The measurement with two replicas: +179 to +192 µs.
		{"synchronous poll", 185 * us, []time.Duration{179 * us, 192 * us, 184 * us}, 100 * us, report.Fail},
		{"rounds disagree", 45 * us, []time.Duration{20 * us, 70 * us}, 100 * us, report.Inconclusive},
		{"starved client", 20 * us, []time.Duration{20 * us, 25 * us}, 3 * time.Millisecond, report.Inconclusive},
		{"starved and slow", 185 * us, []time.Duration{185 * us, 180 * us}, 3 * time.Millisecond, report.Inconclusive},
		{"one round", 20 * us, []time.Duration{20 * us}, 100 * us, report.Inconclusive},
	} {
		c := pollVerdict("default (prequal)", 50*us, tc.cost, tc.rounds, bench.Starvation{Lag: tc.lag, Pressure: -1})
		if c.Outcome() != tc.want {
			t.Errorf("%s: %s", tc.name, c)
		}
		if !strings.Contains(c.Goal, "50µs") {
			t.Errorf("%s: goal does not state its threshold: %s", tc.name, c.Goal)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.PollGoal = 0
	if c.Validate() == nil {
		t.Error("zero poll goal accepted")
	}
}
