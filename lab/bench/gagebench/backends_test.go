package gagebench

import (
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/lab/report"
)

// be is a round of cells at a count of back ends: the gateway's and the
// direct client's rates, both node-bound on a quiet machine.
func be(gw, dr float64) beRound {
	return beRound{viaGateway: {rate: gw, util: 0.97, minUtil: 0.9}, direct: {rate: dr, util: 0.98, minUtil: 0.9}}
}

// with is r with cell k changed by f.
func with(r beRound, k int, f func(*beCell)) beRound {
	f(&r[k])
	return r
}

func notBound(c *beCell) { c.util = 0.5 }
func starved(c *beCell)  { c.starved = "the machine was 1.0% idle" }

func TestBackendScaleVerdict(t *testing.T) {
	one := []beRound{be(70, 72), be(71, 72)}
	for _, tc := range []struct {
		name  string
		large []beRound
		small []beRound
		want  report.Outcome
	}{
		{"linear", []beRound{be(540, 550), be(545, 552)}, one, report.Pass},
		{"flat", []beRound{be(300, 550), be(310, 552)}, one, report.Fail},
		{"rounds disagree", []beRound{be(540, 550), be(380, 552)}, one, report.Inconclusive},
		{"one round", []beRound{be(540, 550)}, one[:1], report.Inconclusive},
		{"a starved cell", []beRound{with(be(540, 550), direct, starved), be(545, 552)}, one, report.Inconclusive},
		// The denominator must be node-bound: an idle back end at 1
		// inflates the ratio.
		{"gateway at the fewest not node-bound", []beRound{be(540, 550), be(545, 552)}, []beRound{with(be(50, 72), viaGateway, notBound), be(71, 72)}, report.Inconclusive},
		// The load generator could drive 8 (direct did): the gateway's
		// shortfall is the finding, not a doubt.
		{"gateway at the most not node-bound", []beRound{with(be(300, 550), viaGateway, notBound), with(be(310, 552), viaGateway, notBound)}, one, report.Fail},
		{"direct at the most not node-bound", []beRound{with(be(300, 300), direct, notBound), be(310, 552)}, one, report.Inconclusive},
	} {
		c := scaleVerdict(1, 8, tc.small, tc.large)
		if c.Outcome() != tc.want {
			t.Errorf("%s: %s", tc.name, c)
		}
	}
	if c := scaleVerdict(2, 2, []beRound{be(140, 140), be(141, 141)}, []beRound{be(140, 140), be(141, 141)}); c.Outcome() != report.Inconclusive {
		t.Errorf("one count of back ends: %s", c)
	}
}

func TestBackendPenaltyVerdict(t *testing.T) {
	for _, tc := range []struct {
		name string
		rs   []beRound
		want report.Outcome
	}{
		{"the paper's 1.8%", []beRound{be(540, 550), be(541, 551)}, report.Pass},
		{"10% penalty", []beRound{be(495, 550), be(496, 551)}, report.Fail},
		{"rounds disagree", []beRound{be(540, 550), be(500, 551)}, report.Inconclusive},
		{"one round", []beRound{be(540, 550)}, report.Inconclusive},
		{"a starved gateway cell", []beRound{with(be(540, 550), viaGateway, starved), be(541, 551)}, report.Inconclusive},
		{"the direct baseline not node-bound", []beRound{with(be(540, 550), direct, notBound), be(541, 551)}, report.Inconclusive},
		{"the gateway left the back ends idle", []beRound{with(be(300, 550), viaGateway, notBound), with(be(310, 551), viaGateway, notBound)}, report.Fail},
		{"no direct throughput", []beRound{be(540, 0), be(541, 0)}, report.Inconclusive},
	} {
		c := penaltyVerdict(8, tc.rs)
		if c.Outcome() != tc.want {
			t.Errorf("%s: %s", tc.name, c)
		}
	}
	c := penaltyVerdict(4, []beRound{with(be(540, 550), direct, notBound), be(541, 551)})
	if !strings.Contains(c.String(), "round 1, 4 back ends, direct: not node-bound") {
		t.Errorf("the doubt does not name the cell: %s", c)
	}
}

func TestValidateBackends(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Backends = nil
	if err := cfg.Validate(); err != nil {
		t.Errorf("backends not selected, its knobs judged: %v", err)
	}
	cfg.Sections = []string{"backends"}
	if err := cfg.Validate(); err == nil {
		t.Error("no counts of back ends accepted")
	}
	cfg.Backends = []int{1, 1000}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "cores") {
		t.Errorf("1000 back ends of 0.15 cores: %v", err)
	}
	cfg.Backends, cfg.BackendSpin = []int{1, 2}, 0
	if err := cfg.Validate(); err == nil {
		t.Error("a spin of 0 accepted")
	}
}

func TestFitLine(t *testing.T) {
	// 0.01 cores idle plus 120 µs a request.
	xs := []float64{70, 140, 280, 560}
	var ys []float64
	for _, x := range xs {
		ys = append(ys, 0.01+120e-6*x)
	}
	slope, icpt := fitLine(xs, ys)
	if d := time.Duration(slope * float64(time.Second)); d < 119*time.Microsecond || d > 121*time.Microsecond || icpt < 0.009 || icpt > 0.011 {
		t.Errorf("fit: %v per request, %.4f idle", d, icpt)
	}
}
