package dacsim

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/dac"
	"github.com/neptune-cluster/neptune/lab/report"
)

func shortSim() SimConfig {
	c := DefaultSimConfig()
	c.Warmup, c.Duration = time.Second, 6*time.Second
	if testing.Short() {
		c.Duration = 3 * time.Second
	}
	return c
}

// TestSimUnresponsiveStaged: with LAT and staged timeouts, k unresponsive
// nodes cost exactly their k partitions in every call (§4.4); with uniform
// timeouts the loss climbs to their ancestors.
func TestSimUnresponsiveStaged(t *testing.T) {
	for k := 1; k <= 3; k++ {
		c := shortSim()
		c.Unresponsive, c.Rate, c.Quality = k, 20, 0.5
		r, err := Simulate(c)
		if err != nil {
			t.Fatal(err)
		}
		// Exponential reduction times occasionally outlast the staged
		// budget and cut off a subtree, so "every call" is 97% here.
		if r.Calls == 0 || r.MinLost != k || r.ExactlyLost[k] < r.Calls*97/100 {
			t.Errorf("staged, k=%d: lost %d..%d partitions, exactly %d in %d of %d calls",
				k, r.MinLost, r.MaxLost, k, r.ExactlyLost[k], r.Calls)
		}
		if r.Succeeded != r.Calls {
			t.Errorf("staged, k=%d: %d of %d calls met ρ=0.5", k, r.Succeeded, r.Calls)
		}
		// The paper's baseline: random binomial placement, uniform timeouts.
		c.Uniform, c.Scheme = true, dac.Binomial
		u, err := Simulate(c)
		if err != nil {
			t.Fatal(err)
		}
		if lost := (1 - u.Coverage) * float64(c.Nodes); lost < float64(k)+1 {
			t.Errorf("uniform binomial, k=%d: lost %.1f partitions per call, want at least %d", k, lost, k+1)
		}
	}
}

// TestSimSchemes: the caller of Base is the bottleneck well below the
// capacity the delegated trees sustain, and LAT answers faster than Flat.
func TestSimSchemes(t *testing.T) {
	res := map[dac.Scheme]SimResult{}
	for _, s := range treeSchemes {
		c := shortSim()
		c.Scheme, c.Rate, c.FastNodes = s, 55, 4
		r, err := Simulate(c)
		if err != nil {
			t.Fatal(err)
		}
		res[s] = r
	}
	if b, l := res[dac.Base].Throughput, res[dac.LAT].Throughput; b*2 > l {
		t.Errorf("Base throughput %.1f not below half of LAT's %.1f", b, l)
	}
	if f, l := res[dac.Flat].Mean, res[dac.LAT].Mean; l >= f {
		t.Errorf("LAT mean %v not below Flat's %v", l, f)
	}
	for _, s := range []dac.Scheme{dac.Flat, dac.Binomial, dac.LAT} {
		if res[s].Succeeded < res[s].Calls*9/10 {
			t.Errorf("%v: %d of %d calls succeeded below capacity", s, res[s].Succeeded, res[s].Calls)
		}
	}
}

func TestSimDeterministic(t *testing.T) {
	c := shortSim()
	c.Duration = 2 * time.Second
	a, err := Simulate(c)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Simulate(c)
	if a.Mean != b.Mean || a.Succeeded != b.Succeeded || a.P99 != b.P99 {
		t.Errorf("same seed, different results: %+v vs %+v", a, b)
	}
}

func TestSimConfigValidate(t *testing.T) {
	for field, mut := range map[string]func(*SimConfig){
		"Nodes":        func(c *SimConfig) { c.Nodes = 0 },
		"Procs":        func(c *SimConfig) { c.Procs = 0 },
		"FastNodes":    func(c *SimConfig) { c.FastNodes = 99 },
		"Rate":         func(c *SimConfig) { c.Rate = 0 },
		"Duration":     func(c *SimConfig) { c.Duration = c.Warmup },
		"Quality":      func(c *SimConfig) { c.Quality = 0 },
		"Unresponsive": func(c *SimConfig) { c.Unresponsive = c.Nodes },
		"Scheme":       func(c *SimConfig) { c.Scheme = -1 },
		"Loads":        func(c *SimConfig) { c.Loads = 9 },
		"Announce":     func(c *SimConfig) { c.Loads, c.Announce = LoadsStale, 0 },
		"Piggyback":    func(c *SimConfig) { c.Loads, c.Announce, c.Piggyback = LoadsStale, time.Second, true },
		"Candidates":   func(c *SimConfig) { c.Candidates = 1.5 },
	} {
		c := DefaultSimConfig()
		mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: Validate() = %v", field, err)
		}
	}
	if err := DefaultSimConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestRunWritesTablesAndFiles(t *testing.T) {
	var buf bytes.Buffer
	o := DefaultOptions()
	o.Out, o.Sections = t.TempDir(), []string{"nope"}
	if err := Run(context.Background(), o, &buf); err == nil {
		t.Error("unknown section accepted")
	}
	dir := t.TempDir()
	buf.Reset()
	o = Options{Sections: Sections, Out: dir, Seed: 1, Quick: true, Duration: 500 * time.Millisecond}
	if err := Run(context.Background(), o, &buf); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"dac_trees.csv", "dac_scale.csv", "dac_scale.svg", "dac_trees_heterogeneous_response.svg", "dac_loads.csv", "dac_loads_response.svg", "dac_loads_messages.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if out := buf.String(); !strings.Contains(out, "Fig 22") || !strings.Contains(out, "LAT mean") || !strings.Contains(out, "verdicts:") {
		t.Errorf("output lacks the tables:\n%s", out)
	}
}

// TestLoadChecksCanFail: the loads section's verdicts PASS only when the
// contender is both close to exact loads and cheap; a slow or chatty one
// FAILs; a starved baseline is INCONCLUSIVE whatever the contender did.
func TestLoadChecksCanFail(t *testing.T) {
	exact := SimResult{Calls: 500, Succeeded: 500, Mean: 280 * time.Millisecond}
	pollAll := SimResult{Calls: 500, Succeeded: 500, Mean: 286 * time.Millisecond, Control: 1800}
	for _, c := range []struct {
		name     string
		exact, r SimResult
		want     []report.Outcome
	}{
		{"close and cheap", exact, SimResult{Calls: 500, Succeeded: 500, Mean: 300 * time.Millisecond, Control: 16, Announcements: 18}, []report.Outcome{report.Pass, report.Pass}},
		{"slow", exact, SimResult{Calls: 500, Succeeded: 500, Mean: 370 * time.Millisecond, Control: 16, Announcements: 18}, []report.Outcome{report.Fail, report.Pass}},
		{"loses calls", exact, SimResult{Calls: 500, Succeeded: 480, Mean: 250 * time.Millisecond, Control: 16}, []report.Outcome{report.Fail, report.Pass}},
		{"piggybacked, free but slow", exact, SimResult{Calls: 500, Succeeded: 500, Mean: 340 * time.Millisecond, Control: 16}, []report.Outcome{report.Fail, report.Pass}},
		{"chatty", exact, SimResult{Calls: 500, Succeeded: 500, Mean: 290 * time.Millisecond, Control: 16, Announcements: 183}, []report.Outcome{report.Pass, report.Fail}},
		{"starved baseline", SimResult{Calls: 500, Succeeded: 300, Mean: 900 * time.Millisecond}, SimResult{Calls: 500, Succeeded: 500, Mean: 300 * time.Millisecond}, []report.Outcome{report.Inconclusive, report.Inconclusive}},
	} {
		got := report.Outcomes(loadChecks(c.name, c.exact, pollAll, c.r))
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSimCountsControlMessages: polling every node costs 2n messages a
// call, k polls 2k, and announcements every node's once per interval,
// spread over the calls; exact loads cost nothing. Stale loads cost
// latency against exact ones at a load where LAT's choices matter.
func TestSimCountsControlMessages(t *testing.T) {
	c := shortSim()
	c.Rate = 40
	res := map[LoadSource]SimResult{}
	for _, l := range []LoadSource{LoadsExact, LoadsPollAll, LoadsStale} {
		cc := c
		cc.Loads, cc.Announce, cc.Polls = l, time.Second, 3
		r, err := Simulate(cc)
		if err != nil {
			t.Fatal(err)
		}
		res[l] = r
	}
	if r := res[LoadsExact]; r.Control != 0 || r.Announcements != 0 {
		t.Errorf("exact loads: %.1f control messages and %.1f announcements a call, want none", r.Control, r.Announcements)
	}
	if r := res[LoadsPollAll]; r.Control != float64(2*c.Nodes) {
		t.Errorf("poll-all: %.1f control messages a call, want 2n = %d", r.Control, 2*c.Nodes)
	}
	r := res[LoadsStale]
	if r.Control != 6 {
		t.Errorf("3 polls: %.1f control messages a call, want 6", r.Control)
	}
	// 24 nodes announcing once a second at 40 calls/s: 0.6 a call.
	if r.Announcements < 0.5 || r.Announcements > 0.7 {
		t.Errorf("announcements %.2f a call, want about 0.6", r.Announcements)
	}
	if r.Mean <= res[LoadsExact].Mean {
		t.Errorf("loads a second old: mean %v, not above exact loads' %v", r.Mean, res[LoadsExact].Mean)
	}
}

// TestSinceView: a caller's view is the last report plus its own work
// committed after it and not yet returned; a report taken after a commit
// already holds that work, and a late report (carried back with a call's
// results) does not undo a newer one.
func TestSinceView(t *testing.T) {
	t0 := time.Unix(100, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	v := newView(ViewSince, 2)
	load := func() time.Duration { return v.known(at(1000))[0].Load }
	v.report(0, 10*time.Millisecond, at(0))
	v.commit(0, 5*time.Millisecond, at(10))
	v.commit(0, 7*time.Millisecond, at(20))
	if got := load(); got != 22*time.Millisecond {
		t.Fatalf("report 10 ms + commits 5 and 7: %v", got)
	}
	v.done(0, 5*time.Millisecond, at(10))
	if got := load(); got != 17*time.Millisecond {
		t.Fatalf("after the first call returned: %v, want 17ms", got)
	}
	v.report(0, 30*time.Millisecond, at(15)) // holds the commit at 10 ms, not the one at 20 ms
	if got := load(); got != 37*time.Millisecond {
		t.Fatalf("report at 15 ms of 30 ms + commit at 20 ms: %v, want 37ms", got)
	}
	v.report(0, time.Millisecond, at(5)) // older than the one held
	if got := load(); got != 37*time.Millisecond {
		t.Fatalf("an older report replaced a newer one: %v", got)
	}
	if v.known(at(1000))[1].Seen() {
		t.Error("a node never reported is seen")
	}
}

func TestLagCorrelation(t *testing.T) {
	// A series that keeps its ranking correlates 1 with itself later; one
	// whose ranking flips correlates -1; a constant sample is skipped.
	up := [][]float64{{1, 2, 3}, {2, 3, 4}, {3, 4, 5}}
	if r := lagCorrelation(up, 1); math.Abs(r-1) > 1e-9 {
		t.Fatalf("kept ranking: %v, want 1", r)
	}
	flip := [][]float64{{1, 2, 3}, {3, 2, 1}, {1, 2, 3}}
	if r := lagCorrelation(flip, 1); math.Abs(r+1) > 1e-9 {
		t.Fatalf("flipped ranking: %v, want -1", r)
	}
	if r := lagCorrelation([][]float64{{1, 1}, {1, 2}}, 1); !math.IsNaN(r) {
		t.Fatalf("constant sample: %v, want NaN", r)
	}
}
