package schedbench

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/cli"
	"github.com/neptune-cluster/neptune/internal/sched"
	"github.com/neptune-cluster/neptune/lab/report"
	"github.com/neptune-cluster/neptune/lab/sim/schedsim"
)

// classesWorkload5 is the section's workload at scale 5 with its
// guarantees, as runClasses builds it.
func classesWorkload5(t *testing.T) schedsim.Workload {
	t.Helper()
	wl, err := schedsim.ScaledWorkload(classesWorkload, 5)
	if err != nil {
		t.Fatal(err)
	}
	wl.Classes = slices.Clone(wl.Classes)
	for k := range wl.Classes {
		wl.Classes[k].Guarantee = guarantee
	}
	return wl
}

func TestWholeNodes(t *testing.T) {
	for _, tc := range []struct {
		name          string
		alloc, demand []float64
		n             int
		want          []int
	}{
		{"largest remainders", []float64{0.8, 2.4, 4.8}, []float64{0.64, 1.92, 3.84}, 8, []int{1, 2, 5}},
		{"overload", []float64{0.64, 5.76, 1.6}, []float64{0.64, 5.76, 3.84}, 8, []int{1, 6, 1}},
		{"one node fewer", []float64{0.7, 2.1, 4.2}, []float64{0.64, 1.92, 3.84}, 7, []int{1, 2, 4}},
		{"a class below a node keeps one", []float64{0.2, 0.3, 3.5}, []float64{0.2, 0.3, 3.5}, 4, []int{1, 1, 2}},
		{"no demand, no node", []float64{0, 1.5, 2.5}, []float64{0, 1, 2}, 4, []int{0, 2, 2}},
	} {
		if got := wholeNodes(tc.alloc, tc.demand, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("%s: wholeNodes(%v) = %v, want %v", tc.name, tc.alloc, got, tc.want)
		}
	}
}

// TestPartitionSchedule checks the emulated periodic partitioning on the
// default timeline: one interval late after each change of demand and
// after the failure, whole nodes by the rule, the victim gold's.
func TestPartitionSchedule(t *testing.T) {
	wl := classesWorkload5(t)
	ps := plan(wl, 8, 2, 0.8, 5, 2*time.Second)
	cost := []float64{wl.Means[0].Seconds(), wl.Means[1].Seconds(), wl.Means[2].Seconds()}
	divs := partitionSchedule(ps, wl.Classes, cost, 8, 2, 2*time.Second)
	steady := []int{0, 1, 1, 2, 2, 2, 2, 2}
	want := []division{
		{0, steady},
		{14 * time.Second, []int{0, 1, 1, 1, 1, 1, 1, 2}},  // the spike (from 12 s), seen at the next re-division
		{34 * time.Second, steady},                         // calm from 32 s
		{44 * time.Second, []int{-1, 0, 1, 1, 2, 2, 2, 2}}, // n0 down from 42 s
		{54 * time.Second, steady},                         // back from 52 s
	}
	if !slices.EqualFunc(divs, want, func(a, b division) bool { return a.From == b.From && slices.Equal(a.Owner, b.Owner) }) {
		t.Errorf("schedule %v,\nwant %v", divs, want)
	}
	if got := describe(divs, wl.Classes); !strings.HasPrefix(got, "from 0s 1/2/5, from 14s 1/6/1") {
		t.Errorf("describe: %s", got)
	}
}

func TestRouting(t *testing.T) {
	wl := classesWorkload5(t)
	ps := plan(wl, 8, 2, 0.8, 5, 2*time.Second)
	cost := []float64{wl.Means[0].Seconds(), wl.Means[1].Seconds(), wl.Means[2].Seconds()}
	divs := partitionSchedule(ps, wl.Classes, cost, 8, 2, 2*time.Second)
	rt := newRouting(divs, 3)
	// Three distinct divisions: 9 partitions; n1 serves silver, then
	// silver in the spike, then gold while n0 is down.
	if got := rt.hosted(1); got != "1,4,6" {
		t.Errorf("n1 hosts %q, want 1,4,6", got)
	}
	if got := rt.partitions(); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Errorf("partitions %v", got)
	}
	// Whatever the time, a class's partition is hosted by exactly the
	// nodes the division in force gives the class.
	for at := time.Duration(0); at < ps[len(ps)-1].To; at += 500 * time.Millisecond {
		d := divs[0]
		for _, x := range divs {
			if x.From <= at {
				d = x
			}
		}
		for k := range 3 {
			p := strconv.Itoa(rt.partition(at, k))
			for n, owner := range d.Owner {
				if hosts := slices.Contains(strings.Split(rt.hosted(n), ","), p); hosts != (owner == k) {
					t.Fatalf("at %v, class %d goes to partition %s: n%d hosts it %t, serves class %d", at, k, p, n, hosts, owner)
				}
			}
		}
	}
	aware := newRouting(nil, 3)
	if aware.partition(20*time.Second, 2) != 0 || aware.hosted(5) != "0" || !slices.Equal(aware.partitions(), []int{0}) {
		t.Error("class-aware does not send every class to partition 0 on every node")
	}
}

// TestClassesTraceFollowsThePlan: each phase gets its rate and mix.
func TestClassesTraceFollowsThePlan(t *testing.T) {
	wl := classesWorkload5(t)
	ps := plan(wl, 8, 2, 0.8, 5, 2*time.Second)
	if end := ps[len(ps)-1].To; end != 62*time.Second {
		t.Fatalf("the timeline ends at %v, want 2 s + 300 s / 5", end)
	}
	tr := drawTrace(rand.New(rand.NewPCG(1, 1)), wl, 0.06, segments(ps))
	for _, p := range ps {
		counts := make([]float64, 3)
		for _, a := range tr {
			if a.at >= p.From && a.at < p.To {
				counts[a.class]++
			}
		}
		for k, r := range p.Rates {
			want := r * (p.To - p.From).Seconds()
			if math.Abs(counts[k]-want) > 4*math.Sqrt(want) {
				t.Errorf("%s: class %d drew %v arrivals, want about %.0f", p.Name, k, counts[k], want)
			}
		}
	}
	if s, c := ps[2], ps[1]; s.Name != "spike" || s.Rates[silver] != spikeFactor*c.Rates[silver] || s.Rates[0] != c.Rates[0] {
		t.Errorf("the spike does not triple silver alone: %v against %v", s.Rates, c.Rates)
	}
	if f := ps[4]; f.Name != "failure" || !slices.Equal(f.Down, []int{victim}) || !f.failing() || !f.Judged {
		t.Errorf("phase 4 is %+v, want the judged failure of n%d", f, victim)
	}
}

func TestServiceConfigIsAValidNodeConfig(t *testing.T) {
	wl := classesWorkload5(t)
	y := serviceConfig(wl.Classes, "1,4,6", 2, sched.Adaptive, 5)
	fc, err := cli.ParseConfig([]byte("id: n1\n" + y))
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	s := fc.Services[0]
	if !slices.Equal([]int(s.Partitions), []int{1, 4, 6}) || len(s.Classes) != 3 || s.Classes[1].Guarantee != guarantee || s.Classes[2].Name != "bronze" {
		t.Errorf("parsed %+v", s)
	}
}

// phases builds the cells of one judged phase: rounds rounds of both
// schemes with the given LossPercent each (class-aware, partitioning),
// healthy unless edit changes them.
func phases(phase, rounds int, loss [2]float64, edit func(*phaseCell)) []phaseCell {
	var cs []phaseCell
	for r := range rounds {
		for _, s := range schemes {
			c := phaseCell{Round: r, Scheme: s, Phase: phase, measured: measured{Offered: 1000, Realized: 1000 * (1 - loss[s]/100), Arrivals: 500,
				Util: 0.95, Peak: 0.98, Lag: 100 * time.Microsecond}}
			if edit != nil {
				edit(&c)
			}
			cs = append(cs, c)
		}
	}
	return cs
}

func TestPhaseVerdict(t *testing.T) {
	spike := planPhase{Name: "spike", Judged: true}
	failure := planPhase{Name: "failure", Judged: true}
	failure.Down = []int{victim}
	wins := [2]float64{20, 28}
	loses := [2]float64{30, 28}
	for _, tc := range []struct {
		name  string
		p     planPhase
		cells []phaseCell
		want  report.Outcome
	}{
		{"class-aware loses less", spike, phases(1, 3, wins, nil), report.Pass},
		{"class-aware loses more", spike, phases(1, 3, loses, nil), report.Fail},
		{"a tie meets the goal", spike, phases(1, 2, [2]float64{25, 25}, nil), report.Pass},
		{"one round", spike, phases(1, 1, wins, nil), report.Inconclusive},
		{"rounds disagree", spike, slices.Concat(phases(1, 2, wins, nil), func() []phaseCell {
			cs := phases(1, 1, loses, nil)
			for i := range cs {
				cs[i].Round = 2
			}
			return cs
		}()), report.Inconclusive},
		{"a starved machine", spike, phases(1, 3, wins, func(c *phaseCell) {
			if c.Round == 1 && c.Scheme == partitioning {
				c.Starved, c.Reason = true, "the machine was 1.0% idle"
			}
		}), report.Inconclusive},
		{"a quota broken", spike, phases(1, 3, wins, func(c *phaseCell) {
			if c.Round == 0 {
				c.Over, c.Peak = true, 1.3
			}
		}), report.Inconclusive},
		{"class-aware not CPU-bound", spike, phases(1, 3, wins, func(c *phaseCell) {
			if c.Scheme == classAware {
				c.Util = 0.5
			}
		}), report.Inconclusive},
		{"partitioning's idle nodes do not count", spike, phases(1, 3, wins, func(c *phaseCell) {
			if c.Scheme == partitioning {
				c.Util = 0.5
			}
		}), report.Pass},
		{"a late load generator", spike, phases(1, 3, wins, func(c *phaseCell) { c.Lag = 5 * time.Millisecond }), report.Inconclusive},
		{"failed calls outside a failure", spike, phases(1, 3, wins, func(c *phaseCell) { c.Failed = 40 }), report.Inconclusive},
		{"failed calls in the failure", failure, phases(4, 3, wins, func(c *phaseCell) { c.Failed = 40 }), report.Pass},
		{"a scheme missing", spike, slices.DeleteFunc(phases(1, 3, wins, nil), func(c phaseCell) bool { return c.Scheme == partitioning }), report.Inconclusive},
	} {
		c := phaseVerdict(tc.p, tc.cells)
		if got := c.Outcome(); got != tc.want {
			t.Errorf("%s: %v, want %v: %s", tc.name, got, tc.want, c)
		}
	}
}

func TestClassesVerdicts(t *testing.T) {
	wl := classesWorkload5(t)
	ps := plan(wl, 8, 2, 0.8, 5, time.Second)
	var cells []phaseCell
	for i, p := range ps {
		loss := [2]float64{5, 5}
		switch p.Name {
		case "spike":
			loss = [2]float64{20, 30}
		case "failure":
			loss = [2]float64{12, 10}
		}
		cells = append(cells, phases(i, 2, loss, nil)...)
	}
	got := report.Outcomes(classesVerdicts(ps, cells))
	if want := []report.Outcome{report.Pass, report.Fail, report.Pass}; !slices.Equal(got, want) {
		t.Errorf("spike won, failure lost: %v, want %v (spike, failure, quotas)", got, want)
	}
	cells[0].Peak, cells[0].Over = 1.4, true // in the warm-up: no phase verdict reads it, the quota's does
	if got := report.Outcomes(classesVerdicts(ps, cells)); got[2] != report.Fail || got[0] != report.Pass {
		t.Errorf("a quota broken in the warm-up: %v, want the quota verdict FAIL alone", got)
	}
}

func TestClassesConfigValidate(t *testing.T) {
	c := DefaultConfig()
	c.Classes.Balance = "" // the product's default
	if err := c.Validate(); err != nil {
		t.Errorf("the default balancing policy: %v", err)
	}
	for name, edit := range map[string]func(*Config){
		"one node":        func(c *Config) { c.Classes.Nodes = 1 },
		"no cpu":          func(c *Config) { c.Classes.CPU = 0 },
		"no demand":       func(c *Config) { c.Classes.Demand = 0 },
		"scale below 1":   func(c *Config) { c.Classes.Scale = 0.5 },
		"unknown balance": func(c *Config) { c.Classes.Balance = "fastest" },
		"unknown section": func(c *Config) { c.Sections = []string{"classes", "fig"} },
		"no section":      func(c *Config) { c.Sections = nil },
	} {
		c := DefaultConfig()
		edit(&c)
		if c.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
