package gagebench

import (
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// Fig 3 is judged at the simulation's accounting cycle only, Fig 5 on
// every CV, as gagesim judges them.
func TestDevVariants(t *testing.T) {
	var judged3, judged5, n5 int
	for _, v := range devVariants() {
		switch {
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
	if judged3 != 1 || judged5 != len(gagesim.SizeCVs) || n5 != judged5 {
		t.Errorf("judged: Fig 3 %d, Fig 5 %d of %d", judged3, judged5, n5)
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
