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
	// Two nodes: one served 40 GRU in 100 ms at 80% busy (50 GRU/s... *10 =
	// 500 GRPS), one 90 GRU fully busy (900 GRPS).
	now := t0
	for i := range 20 {
		now = t0.Add(time.Duration(i) * 100 * time.Millisecond)
		e.Observe(now, NodeReport{Node: "n1", Interval: 100 * time.Millisecond, Used: gru.Scale(40), Utilization: 0.8})
		e.Observe(now, NodeReport{Node: "n2", Interval: 100 * time.Millisecond, Used: gru.Scale(90), Utilization: 1})
	}
	if got := e.GRPS(now); !within(got, 1400, 1e-6) {
		t.Errorf("capacity %v GRPS, want 1400", got)
	}
	// A lightly loaded report does not drag the estimate down.
	e.Observe(now, NodeReport{Node: "n2", Interval: 100 * time.Millisecond, Used: gru.Scale(1), Utilization: 0.05})
	if got := e.Nodes(now)["n2"]; !within(got, 900, 1e-6) {
		t.Errorf("n2 %v GRPS after an idle report, want 900", got)
	}
	// n1 stops reporting: dropped after the TTL.
	for i := range 15 {
		now = now.Add(100 * time.Millisecond)
		e.Observe(now, NodeReport{Node: "n2", Interval: 100 * time.Millisecond, Used: gru.Scale(90), Utilization: 1})
		_ = i
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
