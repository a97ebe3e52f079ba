package lbbench

import (
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/report"
)

func ms(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }

func quietLB() lbGoalInput {
	return lbGoalInput{
		oracle: lbStats{n: 1000, mean: ms(60), p99: ms(300)},
		dflt:   lbStats{n: 1000, mean: ms(70), p99: ms(360)},
		p2c:    lbStats{n: 1000, mean: ms(200), p99: ms(900)},
		slow:   lbStats{n: 1000, mean: ms(75), p99: ms(400)},
		async:  lbStats{n: 1000, mean: ms(64), p99: ms(330)},
		push:   lbStats{n: 1000, mean: ms(63), p99: ms(320)},
		lag:    [6]time.Duration{ms(0.2), ms(0.2), ms(0.2), ms(0.2), ms(0.2), ms(0.2)},
		machine: [6]bench.Starvation{{Pressure: 0.05, Others: 0.02}, {Pressure: 0.05, Others: 0.02}, {Pressure: -1, Others: -1},
			{Pressure: 0.05, Others: 0.02}, {Pressure: 0.05, Others: 0.02}, {Pressure: 0.05, Others: 0.02}},
	}
}

func TestLBVerdictsPassOnAQuietRun(t *testing.T) {
	for i, c := range lbVerdicts(DefaultConfig(), 16, quietLB(), []lbGoalInput{quietLB(), quietLB()}) {
		if c.Outcome() != report.Pass {
			t.Errorf("goal %d: %s", i, c)
		}
	}
}

func TestLBVerdictsCanFail(t *testing.T) {
	in := quietLB()
	in.dflt.mean, in.dflt.p99 = ms(80), ms(450)   // 1.33× and 1.5× oracle
	in.p2c.mean = ms(120)                         // 1.5× the default
	in.slow.p99 = ms(900)                         // 2× healthy
	in.async.mean, in.async.p99 = ms(70), ms(370) // 1.17× and 1.23× oracle
	in.push.mean, in.push.p99 = ms(67), ms(365)   // 1.12× and 1.22× oracle
	for i, c := range lbVerdicts(DefaultConfig(), 16, in, []lbGoalInput{in, in}) {
		if c.Outcome() != report.Fail {
			t.Errorf("goal %d: %s", i, c)
		}
	}
}

// The case: on a contended machine the slow-replica goal "passed"
// at 0.24× because the healthy p99 it divides by had blown up, on rows
// flagged CPU-starved. Starved rows and an unhealthy baseline are
// INCONCLUSIVE, never PASS.
func TestLBSlowReplicaNotPassOnStarvedRows(t *testing.T) {
	in := quietLB()
	in.dflt.p99 = ms(4000) // 13× oracle: the baseline blew up
	in.slow.p99 = ms(960)  // 0.24× of it
	in.lag[1], in.lag[3] = ms(6), ms(5)
	got := lbVerdicts(DefaultConfig(), 16, in, []lbGoalInput{in, in})
	slow := got[3]
	if slow.Outcome() != report.Inconclusive {
		t.Fatalf("slow-replica goal: %s", slow)
	}
	if s := slow.String(); !strings.Contains(s, "CPU-starved") || !strings.Contains(s, "unhealthy") {
		t.Errorf("no reasons printed: %s", s)
	}
	// Starvation alone (a healthy-looking baseline) is enough.
	in = quietLB()
	in.lag[3] = ms(3)
	if c := lbVerdicts(DefaultConfig(), 16, in, []lbGoalInput{in, in})[3]; c.Outcome() != report.Inconclusive {
		t.Errorf("starved slow row: %s", c)
	}
	// An unhealthy baseline alone is enough.
	in = quietLB()
	in.dflt.p99, in.slow.p99 = ms(900), ms(700)
	if c := lbVerdicts(DefaultConfig(), 16, in, []lbGoalInput{in, in})[3]; c.Outcome() != report.Inconclusive {
		t.Errorf("unhealthy baseline: %s", c)
	}
	// A busy machine during the slow row's run is enough.
	in = quietLB()
	in.machine[3].Others = 0.6
	if c := lbVerdicts(DefaultConfig(), 16, in, []lbGoalInput{in, in})[3]; c.Outcome() != report.Inconclusive || !strings.Contains(c.String(), "machine") {
		t.Errorf("busy machine: %s", c)
	}
	// A starved oracle decides none of the ratios to it.
	in = quietLB()
	in.lag[0] = ms(4)
	if o := report.Outcomes(lbVerdicts(DefaultConfig(), 16, in, []lbGoalInput{in, in})); o[0] != report.Inconclusive || o[1] != report.Inconclusive || o[2] != report.Pass ||
		o[4] != report.Inconclusive || o[5] != report.Inconclusive {
		t.Errorf("starved oracle: %v", o)
	}
}

// The pooled run decides only if every round agrees with it.
func TestLBRoundsMustAgree(t *testing.T) {
	in := quietLB()
	noisy := quietLB()
	noisy.dflt.mean = ms(90) // 1.5× oracle in this round alone
	if c := lbVerdicts(DefaultConfig(), 16, in, []lbGoalInput{in, noisy})[0]; c.Outcome() != report.Inconclusive {
		t.Errorf("rounds disagree: %s", c)
	}
	if c := lbVerdicts(DefaultConfig(), 16, in, []lbGoalInput{in})[0]; c.Outcome() != report.Inconclusive {
		t.Errorf("one round: %s", c)
	}
}

func TestLBGoalThresholdsAreInputs(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GoalMean = 1.1 // quietLB's 1.167× now misses
	if c := lbVerdicts(cfg, 16, quietLB(), []lbGoalInput{quietLB(), quietLB()})[0]; c.Outcome() != report.Fail || !strings.Contains(c.Goal, "1.1×") {
		t.Errorf("mean goal at 1.1: %s", c)
	}
}

// The async goals: 1.10× and 1.2× on a quiet machine, 1.25× for both when
// the run is contended (--hog); a starved async row decides neither.
func TestLBAsyncGoals(t *testing.T) {
	in := quietLB()
	in.async.mean, in.async.p99 = ms(72), ms(370) // 1.2× and 1.23× oracle
	cfg := DefaultConfig()
	if o := report.Outcomes(lbVerdicts(cfg, 16, in, []lbGoalInput{in, in})); o[4] != report.Fail || o[5] != report.Fail {
		t.Errorf("quiet, async 1.2×/1.23×: %v, want FAIL FAIL", o[4:])
	}
	cfg.Hog = 2
	got := lbVerdicts(cfg, 16, in, []lbGoalInput{in, in})
	if o := report.Outcomes(got); o[4] != report.Pass || o[5] != report.Pass || !strings.Contains(got[4].Goal, "contended") {
		t.Errorf("contended, async 1.2×/1.23× against 1.25×: %v (%s)", o[4:], got[4])
	}
	// Beside the hog the machine is busy by design: its CPU pressure does
	// not decide the contended goal, a client late to dispatch does.
	in.machine[0].Others, in.machine[4].Others = 0.9, 0.9
	if o := report.Outcomes(lbVerdicts(cfg, 16, in, []lbGoalInput{in, in})); o[4] != report.Pass || o[5] != report.Pass {
		t.Errorf("contended, machine busy from the hog: %v, want PASS PASS", o[4:])
	}
	in.lag[4] = ms(4)
	if o := report.Outcomes(lbVerdicts(cfg, 16, in, []lbGoalInput{in, in})); o[4] != report.Inconclusive || o[5] != report.Inconclusive {
		t.Errorf("starved async row: %v", o[4:])
	}
	// Without the hog a busy machine makes the async goals undecidable.
	cfg.Hog = 0
	in = quietLB()
	in.machine[4].Others = 0.9
	if o := report.Outcomes(lbVerdicts(cfg, 16, in, []lbGoalInput{in, in})); o[4] != report.Inconclusive || o[5] != report.Inconclusive {
		t.Errorf("quiet goal on a busy machine: %v", o[4:])
	}
}

// Push is judged on the async goals, on its own row: a slow push row
// fails while async passes, and a starved push row decides nothing.
func TestLBPushGoals(t *testing.T) {
	in := quietLB()
	in.push.mean, in.push.p99 = ms(72), ms(370) // 1.2× and 1.23× oracle
	got := lbVerdicts(DefaultConfig(), 16, in, []lbGoalInput{in, in})
	if o := report.Outcomes(got); o[4] != report.Pass || o[5] != report.Pass || o[6] != report.Fail || o[7] != report.Fail {
		t.Errorf("push 1.2×/1.23×, async within: %v, want PASS PASS FAIL FAIL", o[4:])
	}
	if !strings.HasPrefix(got[6].Goal, "push mean") || !strings.HasPrefix(got[7].Goal, "push p99") {
		t.Errorf("push goals named %q, %q", got[6].Goal, got[7].Goal)
	}
	in = quietLB()
	in.machine[5].Others = 0.9
	if o := report.Outcomes(lbVerdicts(DefaultConfig(), 16, in, []lbGoalInput{in, in})); o[6] != report.Inconclusive || o[7] != report.Inconclusive || o[4] != report.Pass {
		t.Errorf("busy machine on the push row only: %v", o[4:])
	}
}

func TestSlowPollChecks(t *testing.T) {
	quiet := bench.Starvation{Lag: ms(0.3), Pressure: 0.05, Others: 0.02}
	busy := bench.Starvation{Lag: ms(0.3), Pressure: 0.6, Others: 1.4}
	wait, discard := lbStats{n: 500, mean: ms(120), poll: ms(8.5)}, lbStats{n: 500, mean: ms(102), poll: ms(2.9)}
	for _, c := range []struct {
		name string
		got  *report.Check
		want report.Outcome
	}{
		{"held as asked", heldCheck(0.081, 0.076, 0.057, 1600), report.Pass},
		{"held too few", heldCheck(0.081, 0.02, 0.01, 1600), report.Fail},
		{"held too many", heldCheck(0.081, 0.15, 0.1, 1600), report.Fail},
		{"discard gains", discardCheck(0.97, "exp", wait, discard, quiet, quiet), report.Pass},
		{"discard gains nothing", discardCheck(0.97, "exp", wait, lbStats{n: 500, mean: ms(119)}, quiet, quiet), report.Fail},
		{"a starved row", discardCheck(0.97, "fine", wait, discard, quiet, busy), report.Inconclusive},
	} {
		if got := c.got.Outcome(); got != c.want {
			t.Errorf("%s: %v, want %v: %s", c.name, got, c.want, c.got)
		}
	}
}
