package gagebench

import (
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/apps/work"
	"github.com/neptune-cluster/neptune/lab/gagesim"
	"github.com/neptune-cluster/neptune/lab/report"
)

// A series sampled at irregular times: each window runs from a sample to
// the one nearest win later, its rate over its actual length.
func TestDeliveredDeviations(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// 10 a second throughout, sampled late now and then.
	var d delivered
	for _, at := range []int{0, 100, 230, 500, 1000, 1090, 1700, 2050, 2600, 3000, 3710} {
		d.at, d.total = append(d.at, ms(at)), append(d.total, float64(at)/100)
	}
	// Windows 100-1090 (nearer 1100 than 1700 is), 1090-2050 and
	// 2050-3000; the next would end at 3710, past to.
	got := d.deviations(ms(50), ms(3500), time.Second, 10)
	if len(got) != 3 || slices.Max(got) > 1e-9 {
		t.Errorf("steady rate: %v, want three windows of 0", got)
	}
	// A window served half its rate deviates 50%; one past to is left out.
	d = delivered{at: []time.Duration{0, ms(1000), ms(2000), ms(3000)}, total: []float64{0, 10, 15, 25}}
	if got := d.deviations(0, ms(2000), time.Second, 10); !slices.Equal(got, []float64{0, 0.5}) {
		t.Errorf("deviations to 2 s: %v, want [0 0.5]", got)
	}
	if got := d.deviations(0, ms(3000), 2*time.Second, 10); !slices.Equal(got, []float64{0.25}) {
		t.Errorf("2 s windows: %v, want [0.25]", got)
	}
}

// binned turns counts per bin into the series pace judges.
func TestBinned(t *testing.T) {
	bins := make([]atomic.Int64, 4)
	for i, n := range []int64{5, 0, 7, 1} {
		bins[i].Store(n)
	}
	d := binned(bins, 10*time.Millisecond)
	if !slices.Equal(d.total, []float64{0, 5, 5, 12, 13}) || d.at[4] != 40*time.Millisecond {
		t.Errorf("binned: %+v", d)
	}
}

// devCellOf is a one-subscriber cell whose windows at 1 s and 4 s
// deviate d1 and d4.
func devCellOf(d1, d4 float64, doubt string) devCell {
	return devCell{dev: [][][]float64{{{d1, d1}}, {{d4}}}, served: []float64{10}, doubt: doubt}
}

func TestDevVerdict(t *testing.T) {
	row := func(judged bool, cells ...devCell) devRow {
		return devRow{devVariant: devVariant{fig: 5, label: "v", judged: judged}, cells: cells}
	}
	good, bad1, bad4 := devCellOf(0.03, 0.01, ""), devCellOf(0.07, 0.01, ""), devCellOf(0.03, 0.03, "")
	for _, tc := range []struct {
		name   string
		rows   []devRow
		w4     int
		want   report.Outcome
		reason string
	}{
		{"within both goals", []devRow{row(true, good, good)}, 1, report.Pass, ""},
		{"a row not judged may miss them", []devRow{row(true, good, good), row(false, bad1, bad1)}, 1, report.Pass, ""},
		{"over at 1 s", []devRow{row(true, good, good), row(true, bad1, bad1)}, 1, report.Fail, ""},
		{"over at 4 s", []devRow{row(true, bad4, bad4)}, 1, report.Fail, ""},
		{"rounds disagree", []devRow{row(true, good, bad1)}, 1, report.Inconclusive, "rounds disagree"},
		{"one round", []devRow{row(true, good)}, 1, report.Inconclusive, "one round"},
		{"a starved cell", []devRow{row(true, good, devCellOf(0.03, 0.01, "the machine was 1.0% idle"))}, 1, report.Inconclusive, "1.0% idle"},
		{"a starved cell that failed", []devRow{row(true, bad1, devCellOf(0.07, 0.01, "the machine was 1.0% idle"))}, 1, report.Inconclusive, "1 cells cannot be judged"},
		{"no 4 s window", []devRow{row(true, good, good)}, -1, report.Inconclusive, "no 4 s window"},
		{"no window measured", []devRow{row(true, devCell{dev: [][][]float64{{{}}, {{}}}}, devCell{dev: [][][]float64{{{}}, {{}}}})}, 1, report.Inconclusive, "no window"},
	} {
		c := devVerdict(5, "usage per response", tc.rows, 0, tc.w4)
		if c.Outcome() != tc.want || !strings.Contains(c.String(), tc.reason) {
			t.Errorf("%s: %s", tc.name, c)
		}
	}
}

// Fig 3 is judged at the simulation's accounting cycle only, Figs 4 and
// 5 on every row, as gagesim judges them; only the figures asked run.
func TestDevVariants(t *testing.T) {
	var judged3, judged5, n5, n4 int
	for _, v := range devVariants([]int{3, 4, 5}) {
		switch {
		case v.fig == 4:
			n4++
			if !v.judged || v.footprint.Bytes == 0 || v.gateway() != "deviation-footprint" || v.profile(DefaultConfig()).method != "read" {
				t.Errorf("Fig 4 row %+v", v)
			}
		case v.fig == 3 && v.judged:
			judged3++
			if v.acct != gagesim.DefaultConfig().AccountingCycle || v.cv != gagesim.AccountingCV {
				t.Errorf("Fig 3 judged on %+v", v)
			}
		case v.fig == 5:
			n5++
			if v.judged {
				judged5++
			}
		}
	}
	if judged3 != 1 || judged5 != len(gagesim.SizeCVs) || n5 != judged5 || n4 != len(gagesim.Footprints) {
		t.Errorf("judged: Fig 3 %d, Fig 5 %d of %d; Fig 4 rows %d", judged3, judged5, n5, n4)
	}
	for _, v := range devVariants([]int{4}) {
		if v.fig != 4 {
			t.Errorf("Fig 4 alone ran %+v", v)
		}
	}
}

// A read that misses costs twice one that hits, as in the simulation:
// the gateway's disk_bandwidth charges a missed block twice the spin, and
// a footprint row's requests cost their mean usage's bottleneck, the
// spin's CPU until half of them miss, the disk beyond.
func TestFootprintCost(t *testing.T) {
	cfg := DefaultConfig()
	spin := cfg.DeviationSpin.Seconds() / 0.010 // GRU
	for _, f := range gagesim.Footprints {
		_, gru := devVariant{fig: 4, footprint: f}.request(cfg)
		if want := spin * max(1, 2*f.Miss); math.Abs(gru-want) > 1e-12 {
			t.Errorf("%s: %g GRU a request, want %g", f, gru, want)
		}
	}
	bw := footProfile(cfg).diskBW
	if disk := float64(work.ReadBlock) / float64(bw); math.Abs(disk/cfg.DeviationSpin.Seconds()-2) > 0.01 {
		t.Errorf("a missed block is %v s of disk at %d B/s, want twice the spin's %v", disk, bw, cfg.DeviationSpin)
	}
}

// Per resource, a window's amount is its bottleneck's: requests of CPU
// then of disk, 10 GRU of each a second, are served 10 GRPS, not 20.
func TestDeliveredBottleneck(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	d := delivered{at: []time.Duration{0, ms(500), ms(1000), ms(2000)}, total: []float64{0, 10, 20, 40}}
	for _, at := range d.at {
		s := at.Seconds()
		d.parts = append(d.parts, [3]float64{10 * s, 10 * s, 0.1 * s})
	}
	if got := d.deviations(0, ms(2000), time.Second, 10); len(got) != 2 || slices.Max(got) > 1e-9 {
		t.Errorf("bottleneck at its reservation: %v, want two windows of 0", got)
	}
	if got := d.rate(ms(100), ms(2000)); math.Abs(got-10) > 1e-9 {
		t.Errorf("rate %g, want 10", got)
	}
	d.parts = nil
	if got := d.rate(0, ms(1900)); math.Abs(got-20) > 1e-9 {
		t.Errorf("total's rate to the last sample by 1.9 s: %g, want 20", got)
	}
	if got := d.rate(ms(1100), ms(1900)); !math.IsNaN(got) {
		t.Errorf("no span: %g, want NaN", got)
	}
}

func TestMissShare(t *testing.T) {
	for _, tc := range []struct {
		bytes, reqs int64
		want        float64
	}{
		{0, 100, 0},
		{50 * work.ReadBlock, 100, 0.5},
		{100*work.ReadBlock + 4096, 100, 1 + 4096.0/(100*work.ReadBlock)},
	} {
		if got := missShare(tc.bytes, tc.reqs); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("missShare(%d, %d) = %g, want %g", tc.bytes, tc.reqs, got, tc.want)
		}
	}
	if !math.IsNaN(missShare(4096, 0)) {
		t.Error("no request: want NaN")
	}
}

// Fig 4's rows are the experiment only if the smallest footprint stayed
// cached and the largest missed: the memory limit made the misses.
func TestFootDoubt(t *testing.T) {
	row := func(f gagesim.Footprint, misses ...float64) devRow {
		r := devRow{devVariant: devVariant{fig: 4, label: f.Label, footprint: f, judged: true}}
		for _, m := range misses {
			r.cells = append(r.cells, devCell{miss: m})
		}
		return r
	}
	fs := gagesim.Footprints
	other := devRow{devVariant: devVariant{fig: 5, label: "CV 0%"}, cells: []devCell{{miss: math.NaN()}}}
	for _, tc := range []struct {
		name   string
		rows   []devRow
		reason string
	}{
		{"the cache made the misses", []devRow{row(fs[0], 0, 0.01), row(fs[1], 0.1), row(fs[3], 0.7, 0.8), other}, ""},
		{"the small one missed", []devRow{row(fs[0], 0.3, 0.2), row(fs[3], 0.8)}, "too small"},
		{"the large one hit", []devRow{row(fs[0], 0), row(fs[3], 0.3, 0.4)}, "too large"},
		{"not measured", []devRow{row(fs[0], math.NaN()), row(fs[3], math.NaN())}, "missed -"},
		{"no Fig 4", []devRow{other}, ""},
	} {
		got := footDoubt(tc.rows)
		if (tc.reason == "") != (got == "") || !strings.Contains(got, tc.reason) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.reason)
		}
	}
}

func TestValidateDeviation(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Sections = []string{"deviation"}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, mod := range map[string]func(*Config){
		"back ends cannot serve the reservations": func(c *Config) { c.DeviationScale = 1 },
		"no back end":             func(c *Config) { c.DeviationBackends = 0 },
		"no spin":                 func(c *Config) { c.DeviationSpin = 0 },
		"quotas over the machine": func(c *Config) { c.DeviationCPU = 8 },
		"no output directory":     func(c *Config) { c.Out = "" },
		"no figure":               func(c *Config) { c.DeviationFigures = nil },
		"no Fig 6 here":           func(c *Config) { c.DeviationFigures = []int{3, 6} },
		"Fig 4 without memory":    func(c *Config) { c.DeviationFigures, c.DeviationMemory = []int{4}, 0 },
	} {
		c := cfg
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestDevMeanOfNothingIsNaN(t *testing.T) {
	if !math.IsNaN(devMean([]devCell{devCellOf(0.1, 0.1, "")}, -1)) || !math.IsNaN(devMean(nil, 0)) {
		t.Error("no window: want NaN, not 0")
	}
}
