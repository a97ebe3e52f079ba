package gagebench

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/gage"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/report"
)

// cell is a pooled result with these tallies and a quiet machine.
func cell(ts map[string]tally) *cellResult {
	r := &cellResult{counts: map[string]*tally{}, secs: 8, starve: bench.Starvation{Lag: 100 * time.Microsecond, Pressure: 0.05}}
	for s, t := range ts {
		r.counts[s] = &t
	}
	return r
}

func TestIsolationVerdict(t *testing.T) {
	good := map[string]tally{"a": {asked: 400, ok: 400}, "b": {asked: 200, ok: 199, dropped: 0, other: 1}, "f": {asked: 600, ok: 300, dropped: 300}}
	for _, tc := range []struct {
		name string
		r    *cellResult
		want report.Outcome
	}{
		{"one failed call", cell(good), report.Fail},
		{"all served, flood dropped", cell(map[string]tally{"a": {asked: 400, ok: 400}, "b": {asked: 200, ok: 200}, "f": {asked: 600, ok: 300, dropped: 300}}), report.Pass},
		{"within reservation dropped", cell(map[string]tally{"a": {asked: 400, ok: 399, dropped: 1}, "b": {asked: 200, ok: 200}, "f": {asked: 600, ok: 300, dropped: 300}}), report.Fail},
		{"flood not dropped", cell(map[string]tally{"a": {asked: 400, ok: 400}, "b": {asked: 200, ok: 200}, "f": {asked: 600, ok: 600}}), report.Fail},
		{"missing contender", nil, report.Inconclusive},
	} {
		if c := isolationVerdict("gage", []string{"a", "b"}, "f", tc.r, 0.99); c.Outcome() != tc.want {
			t.Errorf("%s: %s", tc.name, c)
		}
	}
	r := cell(map[string]tally{"a": {asked: 400, ok: 400}, "b": {asked: 200, ok: 200}, "f": {asked: 600, ok: 300, dropped: 300}})
	r.starve.Pressure, r.starve.Others = 0.5, 0.5
	if c := isolationVerdict("gage", []string{"a", "b"}, "f", r, 0.99); c.Outcome() != report.Inconclusive || !strings.Contains(c.String(), "other work") {
		t.Errorf("starved cell: %s", c)
	}
	r.starve.Pressure, r.starve.Others, r.late = 0.05, 0.02, 10*time.Millisecond
	if c := isolationVerdict("gage", []string{"a", "b"}, "f", r, 0.99); c.Outcome() != report.Inconclusive {
		t.Errorf("late load generator: %s", c)
	}
}

func TestSpareVerdict(t *testing.T) {
	for _, tc := range []struct {
		s1, s2 float64
		want   report.Outcome
	}{
		{27.8, 22.2, report.Pass},
		{30, 20, report.Fail}, // 1.5
		{20, 30, report.Fail}, // FIFO's kind of split
		{10, -2, report.Fail}, // one got less than its reservation
		{0, 0, report.Inconclusive},
	} {
		if c := spareVerdict("gage", tc.s1, tc.s2, 1.25, 0.03); c.Outcome() != tc.want {
			t.Errorf("spare %v:%v: %s", tc.s1, tc.s2, c)
		}
	}
}

func TestSplitAndKillVerdicts(t *testing.T) {
	if c := splitVerdict(40.8, 40, 0.05); c.Outcome() != report.Pass {
		t.Errorf("2%% over: %s", c)
	}
	if c := splitVerdict(36, 40, 0.05); c.Outcome() != report.Fail {
		t.Errorf("10%% under: %s", c)
	}
	const bound = 1100 * time.Millisecond
	for _, tc := range []struct {
		back  time.Duration
		after float64
		want  report.Outcome
	}{
		{time.Second, 40.5, report.Pass},
		{bound + statusPoll, 40, report.Pass},
		{1300 * time.Millisecond, 40, report.Fail}, // late
		{0, 40, report.Fail},                       // never
		{time.Second, 35, report.Fail},             // back, but short of the reservation
	} {
		if c := killVerdict(tc.back, bound, tc.after, 40, 0.05); c.Outcome() != tc.want {
			t.Errorf("back %v, after %v: %s", tc.back, tc.after, c)
		}
	}
}

func TestRatioVerdict(t *testing.T) {
	for _, tc := range []struct {
		pooled float64
		rounds []float64
		want   report.Outcome
	}{
		{0.99, []float64{0.99, 1.0}, report.Pass},
		{0.95, []float64{0.94, 0.96}, report.Fail},
		{0.985, []float64{0.97, 1.0}, report.Inconclusive}, // rounds disagree
		{0.99, []float64{0.99}, report.Inconclusive},       // one round
	} {
		if c := ratioVerdict("ratio", tc.pooled, tc.rounds, 0.98); c.Outcome() != tc.want {
			t.Errorf("%v %v: %s", tc.pooled, tc.rounds, c)
		}
	}
}

func TestProfiles(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Profiles = []string{"net", "gpu"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `"gpu"`) {
		t.Errorf("unknown profile: %v", err)
	}
	cfg.Profiles = nil
	if err := cfg.Validate(); err == nil {
		t.Error("no profile accepted")
	}
	e := &env{cfg: DefaultConfig(), cl: nil, prof: profiles["disk"]}
	y := e.gatewayConfigFor(nil, "credit", 120, []subscriberSpec{{"a", 10}}, "")
	for _, want := range []string{"disk_bandwidth: 10000000", "measured_capacity: false", "{path_prefix: /fsync, service: work, method: fsync}"} {
		if !strings.Contains(y, want) {
			t.Errorf("disk profile's gateway config lacks %q:\n%s", want, y)
		}
	}
}

func TestValidateProcs(t *testing.T) {
	cfg := DefaultConfig()
	for procs, ok := range map[int]bool{-1: false, 0: true, 1: true, 4: true} {
		cfg.Procs = procs
		if err := cfg.Validate(); (err == nil) != ok {
			t.Errorf("procs %d: %v", procs, err)
		}
	}
}

func TestSchedCostVerdict(t *testing.T) {
	for _, tc := range []struct {
		credit, fifo, perRequest time.Duration
		want                     report.Outcome
	}{
		{500 * time.Nanosecond, 300 * time.Nanosecond, 260 * time.Microsecond, report.Pass},
		{10 * time.Microsecond, 300 * time.Nanosecond, 260 * time.Microsecond, report.Fail}, // 3.7%
		{500 * time.Nanosecond, 300 * time.Nanosecond, 0, report.Inconclusive},
	} {
		if c := schedCostVerdict(tc.credit, tc.fifo, tc.perRequest, 0.98); c.Outcome() != tc.want {
			t.Errorf("%v %v %v: %s", tc.credit, tc.fifo, tc.perRequest, c)
		}
	}
}

// The measurement runs the scheduler as the gateway's loop does and
// refuses a scheduler that holds requests with the capacity idle (its
// figure would be the cost of queueing, not of deciding).
func TestSchedulerCost(t *testing.T) {
	fifo := func(c gage.Config, o gage.Options) (gage.Scheduler, error) { return gage.NewFIFO(c, o) }
	if d, err := schedulerCost(fifo, 3, 1000, 2); err != nil || d <= 0 {
		t.Errorf("fifo: %v, %v; want a positive cost", d, err)
	}
	holding := func(c gage.Config, o gage.Options) (gage.Scheduler, error) {
		s, err := gage.NewFIFO(c, o)
		return neverNext{s}, err
	}
	if _, err := schedulerCost(holding, 1, 10, 1); err == nil {
		t.Error("a scheduler that never dispatches was measured")
	}
}

type neverNext struct{ gage.Scheduler }

func (neverNext) Next(time.Time) (gage.Request, bool) { return gage.Request{}, false }

func TestPaceVerdict(t *testing.T) {
	for _, tc := range []struct {
		d1, d4 float64
		want   report.Outcome
	}{
		{0.032, 0.010, report.Pass},
		{0.069, 0.010, report.Fail},
		{0.032, 0.021, report.Fail},
		{math.NaN(), math.NaN(), report.Inconclusive},
	} {
		if c := paceVerdict(tc.d1, tc.d4, 0.07); c.Outcome() != tc.want {
			t.Errorf("%v, %v: %s", tc.d1, tc.d4, c)
		}
	}
}
