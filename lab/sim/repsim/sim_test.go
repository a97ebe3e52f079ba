package repsim

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
)

func TestZipfWeightsHitTheImbalanceFactor(t *testing.T) {
	for _, f := range []float64{1.0 / 64, 0.05, 0.25, 0.5, 1} {
		w := ZipfWeights(64, f)
		s := 0.0
		for _, x := range w {
			s += x
		}
		if got := w[0] / s; math.Abs(got-f) > 1e-6 {
			t.Errorf("factor %g: the first partition draws %g", f, got)
		}
	}
}

// The figure's claim at one rate: with every request on one partition,
// 300 req/s (twice one node's capacity) overwhelms the unreplicated
// service, and a degree of 4 serves it, its reads spread by the client's
// policy over the four replicas.
func TestReplicationCarriesAHotSpotNoReplicaCan(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Imbalance, cfg.Rate = 1, 300
	on := map[int]float64{}
	for _, d := range []int{1, 4} {
		cfg.Degree = d
		res, err := Simulate(cfg)
		if err != nil {
			t.Fatal(err)
		}
		on[d] = res.OnTimeFraction()
	}
	if on[1] >= 0.98 || on[4] < 0.98 {
		t.Fatalf("on time at 300 req/s on one partition: NoRep %.3f, degree 4 %.3f; want NoRep < 0.98 ≤ degree 4", on[1], on[4])
	}
}

// Well under capacity everything is on time whatever the degree.
func TestUnderCapacityAllIsOnTime(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Rate, cfg.Duration = 400, 10e9
	for _, d := range []int{1, 2, 4} {
		cfg.Degree = d
		res, err := Simulate(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.OnTime != res.Measured || res.Measured < 3000 {
			t.Fatalf("degree %d at 400 req/s balanced: %d of %d on time", d, res.OnTime, res.Measured)
		}
	}
}

// A small run of the whole experiment prints its table and a verdict for
// every goal.
func TestRunPrintsTheGoals(t *testing.T) {
	o := DefaultOptions()
	o.Out = t.TempDir()
	o.Base.Duration, o.Base.Warmup = 10e9, 2e9
	o.Degrees, o.Factors, o.Seeds, o.Steps = []int{1, 4}, []float64{1.0 / 64, 1}, 2, 5
	var out bytes.Buffer
	if err := Run(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"deg4/NoRep", "NoRep ≥ degree 4 at imbalance 1/64", "degree 4 ≥ 2.5× NoRep", "fig5.2-sim.svg"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Count(out.String(), "PASS")+strings.Count(out.String(), "FAIL")+strings.Count(out.String(), "INCONCLUSIVE") < 3+1 {
		t.Errorf("not every goal has a verdict:\n%s", out.String())
	}
}
