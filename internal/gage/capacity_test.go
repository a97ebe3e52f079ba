package gage

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestUnitCostIsTheBottleneck(t *testing.T) {
	u := DefaultUnit
	for _, tc := range []struct {
		v    Vector
		want float64
	}{
		{Res(10*time.Millisecond, 10*time.Millisecond, 2000), 1},
		{Res(30*time.Millisecond, 0, 0), 3},
		{Res(5*time.Millisecond, 20*time.Millisecond, 1000), 2},
		{Res(0, 0, 6000), 3},
	} {
		if got := u.Cost(tc.v); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Cost(%v) = %v, want %v", tc.v, got, tc.want)
		}
	}
	noNet := Unit(Res(10*time.Millisecond, 10*time.Millisecond, 0))
	if got := noNet.Cost(Res(0, 0, 1e9)); got != 0 {
		t.Errorf("a resource out of the unit is charged: %v", got)
	}
	if (Unit{}).Validate() == nil || (Unit{-1, 1, 1}).Validate() == nil {
		t.Error("invalid units accepted")
	}
}

func TestEstimatorFromMeasuredUsage(t *testing.T) {
	e, err := NewCapacityEstimator(DefaultUnit, EstimatorOptions{Headroom: 1, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cycle := 100 * time.Millisecond
	busy := func(x float64) Vector { return Vector{x, x, x} }
	// n1 used 40 GRU of each resource in 100 ms at 80% busy: 500 GRPS;
	// n2 90 GRU fully busy: 900 GRPS.
	now := t0
	for i := range 20 {
		now = t0.Add(time.Duration(i) * cycle)
		e.Observe(now, NodeReport{Node: "n1", Interval: cycle, Used: gru.Scale(40), Busy: busy(0.8)})
		e.Observe(now, NodeReport{Node: "n2", Interval: cycle, Used: gru.Scale(90), Busy: busy(1)})
	}
	if got := e.GRPS(now); !within(got, 1400, 1e-6) {
		t.Errorf("capacity %v GRPS, want 1400", got)
	}
	// A lightly loaded report does not drag the estimate down.
	e.Observe(now, NodeReport{Node: "n2", Interval: cycle, Used: gru.Scale(1), Busy: busy(0.05)})
	if got := DefaultUnit.GRPS(e.Nodes(now)["n2"]); !within(got, 900, 1e-6) {
		t.Errorf("n2 %v GRPS after an idle report, want 900", got)
	}
	// Resources are estimated apart: a node whose link is barely used
	// still has the network it declared, and its CPU is what it measured.
	e.Observe(now, NodeReport{Node: "n3", Declared: Vector{1, 1, 12.5e6}})
	for range 30 {
		e.Observe(now, NodeReport{Node: "n3", Interval: cycle, Used: Vector{0.1, 0, 2000}, Busy: Vector{0.25, 0, 0.0016}})
	}
	c := e.Nodes(now)["n3"]
	if !within(c[CPU], 4, 0.01) || c[Disk] != 1 || !within(c[Net], 12.5e6, 0.01) {
		t.Errorf("n3 capacity %v, want {cpu 4 (measured) disk 1 (declared) net 12.5e6}", c)
	}
	// A low start rises from lightly loaded reports: the extrapolation
	// shows room.
	e.Observe(now, NodeReport{Node: "n4", Declared: gru.Scale(10)})
	for range 30 {
		e.Observe(now, NodeReport{Node: "n4", Interval: cycle, Used: gru.Scale(1), Busy: busy(0.01)})
	}
	if got := DefaultUnit.GRPS(e.Nodes(now)["n4"]); !within(got, 1000, 0.01) {
		t.Errorf("n4 %v GRPS, want about 1000", got)
	}
	if !e.Loaded(now) {
		t.Error("figures measured under load or declared: not Loaded")
	}
	// A nearly idle node's figure is an extrapolation, not a measure: one
	// put that waited 3 ms on a disk other processes kept busy says
	// nothing of it (it made the gateway warn of 0.3 GRPS against a
	// declared 800).
	e.Observe(now, NodeReport{Node: "n5", Interval: time.Second, Used: Res(0, 30*time.Microsecond, 200), Busy: Vector{0.001, 0.003, 0}})
	if e.Loaded(now) {
		t.Error("Loaded with n5's figures extrapolated from a nearly idle node")
	}
	e.Forget("n5")
	e.Forget("n3")
	e.Forget("n4")
	// n1 stops reporting: dropped after the TTL.
	for range 15 {
		now = now.Add(cycle)
		e.Observe(now, NodeReport{Node: "n2", Interval: cycle, Used: gru.Scale(90), Busy: busy(1)})
	}
	if got := e.GRPS(now); !within(got, 900, 1e-6) {
		t.Errorf("after n1 went silent: %v GRPS, want 900", got)
	}
}

func TestAdmitNamesSubscribersOverCapacity(t *testing.T) {
	cfg := subs("site1", 250.0, "site2", 150.0, "site3", 50.0, "site4", 60.0)
	if err := Admit(cfg, 600); err != nil {
		t.Errorf("fits: %v", err)
	}
	err := Admit(cfg, 420)
	var oe *OverbookedError
	if !errors.As(err, &oe) || !errors.Is(err, ErrOverbooked) {
		t.Fatalf("Admit over capacity: %v", err)
	}
	if strings.Join(oe.Over, ",") != "site3,site4" || oe.Reserved != 510 {
		t.Errorf("over = %v, reserved %v", oe.Over, oe.Reserved)
	}
	if !strings.Contains(err.Error(), "site3, site4") {
		t.Errorf("message does not name them: %v", err)
	}
}

func TestMeterSteadyRate(t *testing.T) {
	var m Meter
	now := t0
	for range 5000 { // 5 s at 200/s
		now = now.Add(5 * time.Millisecond)
		m.Add(now, 1)
	}
	if got := m.Rate(now); !within(got, 200, 0.02) {
		t.Errorf("rate %v, want 200", got)
	}
	if got := m.Rate(now.Add(5 * time.Second)); got > 2 {
		t.Errorf("rate after 5 idle seconds %v, want ~0", got)
	}
}

func TestPredictorEWMA(t *testing.T) {
	p := predictor{alpha: 0.5, period: 100 * time.Millisecond, m: gru}
	p.observe(t0, gru.Scale(4), 2) // first average seeds: 2 GRU
	if got := DefaultUnit.Cost(p.predict()); !within(got, 2, 1e-9) {
		t.Fatalf("seeded prediction %v, want 2", got)
	}
	p.observe(t0.Add(50*time.Millisecond), gru.Scale(4), 1)  // same cycle: pending
	p.observe(t0.Add(100*time.Millisecond), gru.Scale(8), 1) // closes it: P = 6
	if got := DefaultUnit.Cost(p.predict()); !within(got, 0.5*2+0.5*6, 1e-9) {
		t.Errorf("prediction %v, want 4", got)
	}
}

// A report of nothing used refunds; it is not a sample of the cost.
func TestPredictorIgnoresEmptyReports(t *testing.T) {
	gru := Vector(DefaultUnit)
	p := predictor{alpha: 0.5, period: 100 * time.Millisecond, m: gru}
	t0 := time.Unix(0, 0)
	p.observe(t0, gru.Scale(3), 1)
	for i := range 10 {
		p.observe(t0.Add(time.Duration(i+1)*100*time.Millisecond), Vector{}, 1)
	}
	if got := p.predict(); got != gru.Scale(3) {
		t.Fatalf("prediction %v after empty reports, want %v", got, gru.Scale(3))
	}
}
