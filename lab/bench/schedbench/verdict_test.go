package schedbench

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/cli"
	"github.com/neptune-cluster/neptune/internal/sched"
	"github.com/neptune-cluster/neptune/lab/report"
	"github.com/neptune-cluster/neptune/lab/sim/schedsim"
)

// level builds the cells of one demand level: rounds rounds of the four
// policies with the given LossPercent each (EDF, YID, Greedy, Adaptive),
// healthy (node-bound, not starved) unless edit changes them.
func level(d, rounds int, loss [4]float64, edit func(*cell)) []cell {
	var cs []cell
	for r := range rounds {
		for i, p := range policies {
			c := cell{Round: r, Demand: d, Policy: p, measured: measured{Offered: 1000, Realized: 1000 * (1 - loss[i]/100), Arrivals: 500, Util: 0.97, Peak: 0.97, Lag: 100 * time.Microsecond}}
			if edit != nil {
				edit(&c)
			}
			cs = append(cs, c)
		}
	}
	return cs
}

// withControl adds a control cell of LossPercent loss to every round of
// cs, as the bench's second Greedy cell on the same arrivals.
func withControl(cs []cell, loss float64) []cell {
	out := slices.Clone(cs)
	for _, c := range cs {
		if c.Policy == controlPolicy {
			c.Control = true
			c.Realized = c.Offered * (1 - loss/100)
			out = append(out, c)
		}
	}
	return out
}

func TestLevelVerdict(t *testing.T) {
	tracks := [4]float64{56, 52, 40, 40.5} // Adaptive +0.5 over Greedy
	misses := [4]float64{56, 52, 40, 45}   // +5
	for _, tc := range []struct {
		name  string
		d     int
		cells []cell
		want  report.Outcome
	}{
		{"Adaptive tracks the better", 200, level(200, 3, tracks, nil), report.Pass},
		{"Adaptive follows the worse", 200, level(200, 3, misses, nil), report.Fail},
		{"one round", 200, level(200, 1, tracks, nil), report.Inconclusive},
		{"a starved machine", 200, level(200, 3, tracks, func(c *cell) {
			if c.Round == 1 && c.Policy == sched.YID {
				c.Starved, c.Reason = true, "the machine was 1.0% idle"
			}
		}), report.Inconclusive},
		{"not node-bound at 150%", 150, level(150, 3, tracks, func(c *cell) { c.Util = 0.6 }), report.Inconclusive},
		{"light load need not be node-bound", 50, level(50, 3, [4]float64{1.8, 2.0, 2.2, 2.0}, func(c *cell) { c.Util = 0.5 }), report.Pass},
		{"the quota broke", 200, level(200, 3, tracks, func(c *cell) {
			if c.Policy == sched.Greedy && c.Round == 0 {
				c.Over, c.Util = true, 1.3
			}
		}), report.Inconclusive},
		{"a late load generator", 200, level(200, 3, tracks, func(c *cell) { c.Lag = 5 * time.Millisecond }), report.Inconclusive},
		{"failed calls", 200, level(200, 3, tracks, func(c *cell) { c.Failed = 50 }), report.Inconclusive},
		{"rounds disagree", 200, slices.Concat(level(200, 2, tracks, nil), func() []cell {
			cs := level(200, 1, misses, nil)
			for i := range cs {
				cs[i].Round = 2
			}
			return cs
		}()), report.Inconclusive},
		{"the control agrees with its twin", 200, withControl(level(200, 3, tracks, nil), tracks[2]+1), report.Pass},
		{"the control differs by more than the tolerance", 200, withControl(level(200, 3, misses, nil), misses[2]+3), report.Inconclusive},
		{"a policy missing", 200, slices.DeleteFunc(level(200, 3, tracks, nil), func(c cell) bool { return c.Policy == sched.YID }), report.Inconclusive},
	} {
		c := levelVerdict(2, tc.d, tc.cells)
		if got := c.Outcome(); got != tc.want {
			t.Errorf("%s: %v, want %v: %s", tc.name, got, tc.want, c)
		}
	}
}

func TestRunVerdicts(t *testing.T) {
	good := slices.Concat(level(50, 2, [4]float64{1.8, 2.0, 2.2, 2.0}, func(c *cell) { c.Util = 0.5 }), level(150, 2, [4]float64{50, 45, 35, 35.2}, nil))
	outcomes := func(cs []cell) []report.Outcome { return report.Outcomes(verdicts(2, []int{50, 150}, cs)) }
	if got := outcomes(good); !slices.Equal(got, []report.Outcome{report.Pass, report.Pass, report.Pass, report.Pass}) {
		t.Errorf("healthy run: %v, want 4 PASS", got)
	}
	over := slices.Clone(good)
	over[0].Util, over[0].Peak, over[0].Over = 1.4, 1.4, true
	if got := outcomes(over); got[2] != report.Fail {
		t.Errorf("a quota broken at 140%%: quota verdict %v, want FAIL", got[2])
	}
	unbound := slices.Clone(good)
	for i := range unbound {
		if unbound[i].Demand == 150 {
			unbound[i].Util = 0.6
		}
	}
	if got := outcomes(unbound); got[3] != report.Fail || got[1] != report.Inconclusive {
		t.Errorf("a node not CPU-bound at 150%%: %v, want the bound verdict FAIL and 150%% INCONCLUSIVE", got)
	}
	for i := range unbound {
		unbound[i].Starved = true
	}
	if got := outcomes(unbound); got[3] != report.Inconclusive {
		t.Errorf("not CPU-bound on a starved machine: %v, want INCONCLUSIVE", got[3])
	}
	low := level(50, 2, [4]float64{1.8, 2.0, 2.2, 2.0}, nil)
	if got := report.Outcomes(verdicts(2, []int{50}, low)); got[2] != report.Inconclusive {
		t.Errorf("no level at 100%%: bound verdict %v, want INCONCLUSIVE", got[2])
	}
}

func TestTraceIsSeededAndAtTheRate(t *testing.T) {
	wl, err := schedsim.ScaledWorkload("micro-hybrid", 10)
	if err != nil {
		t.Fatal(err)
	}
	rate, span, share := 100.0, 200*time.Second, 0.25
	a := makeTrace(wl, rate, span, share, 1, 0, 100)
	if b := makeTrace(wl, rate, span, share, 1, 0, 100); !slices.Equal(a, b) {
		t.Error("the same seed, round and level drew different traces")
	}
	if b := makeTrace(wl, rate, span, share, 1, 1, 100); slices.Equal(a, b) {
		t.Error("another round drew the same trace")
	}
	if got, want := float64(len(a)), rate*span.Seconds(); math.Abs(got-want) > 0.05*want {
		t.Errorf("%v arrivals, want about %v", got, want)
	}
	var spin time.Duration
	counts := make([]int, 3)
	for _, x := range a {
		spin += x.spin
		counts[x.class]++
		if x.at < 0 || x.at >= span {
			t.Fatalf("arrival at %v outside [0, %v)", x.at, span)
		}
	}
	// Mean spin = mean scaled service (23.3 ms) × share.
	if got, want := spin/time.Duration(len(a)), time.Duration(float64(wl.Mean)*share); math.Abs(float64(got-want)) > 0.05*float64(want) {
		t.Errorf("mean spin %v, want about %v", got, want)
	}
	for k, n := range counts {
		if math.Abs(float64(n)/float64(len(a))-1.0/3) > 0.03 {
			t.Errorf("class %d has %d of %d arrivals, want a third", k, n, len(a))
		}
	}
}

func TestNodeConfigIsAValidNodeConfig(t *testing.T) {
	for _, name := range schedsim.WorkloadNames() {
		wl, err := schedsim.ScaledWorkload(name, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range policies {
			y := nodeConfig(wl, 2, p, 10)
			// The node's --id flag names it; the file does not.
			fc, err := cli.ParseConfig([]byte("id: sched\n" + y))
			if err != nil {
				t.Fatalf("%s, %s: %v\n%s", name, p, err, y)
			}
			if len(fc.Services) != 1 || fc.Services[0].Policy != p.String() || fc.Services[0].Workers != 2 || len(fc.Services[0].Classes) != 3 ||
				time.Duration(fc.Services[0].OverloadWindow) != 3*time.Second {
				t.Errorf("%s, %s: parsed %+v", name, p, fc.Services)
			}
			for k, c := range fc.Services[0].Classes {
				want := wl.Classes[k]
				got := sched.Yield{Full: c.Value, PreDeadline: time.Duration(c.PreDeadline), Penalty: c.Penalty, Deadline: time.Duration(c.Deadline)}
				switch c.Yield {
				case "throughput":
					got.PreDeadline, got.Penalty = got.Deadline, got.Full
				case "response_time":
					got.PreDeadline, got.Penalty = 0, 0
				}
				if c.Name != want.Name || got != want.Yield {
					t.Errorf("%s, %s: class %d is %s %+v, want %s %+v", name, p, k, c.Name, got, want.Name, want.Yield)
				}
			}
			if !strings.Contains(y, "accounting: cpu") {
				t.Errorf("%s: the node is not charged CPU:\n%s", name, y)
			}
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, edit := range map[string]func(*Config){
		"no cpu":           func(c *Config) { c.CPU = 0 },
		"no demands":       func(c *Config) { c.Demands = nil },
		"a zero demand":    func(c *Config) { c.Demands = []int{0, 100} },
		"a short cell":     func(c *Config) { c.Cell = 100 * time.Millisecond },
		"no rounds":        func(c *Config) { c.Rounds = 0 },
		"unknown workload": func(c *Config) { c.Workload = "search" },
		"scale below 1":    func(c *Config) { c.Scale = 0.5 },
	} {
		c := DefaultConfig()
		edit(&c)
		if c.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestRotate(t *testing.T) {
	if got := rotate(policies, 5); !slices.Equal(got, []sched.Policy{sched.YID, sched.Greedy, sched.Adaptive, sched.EDF}) {
		t.Errorf("rotate by 5: %v", got)
	}
	if !slices.Equal(policies, []sched.Policy{sched.EDF, sched.YID, sched.Greedy, sched.Adaptive}) {
		t.Errorf("rotate changed its argument: %v", policies)
	}
}
