package gage

import (
	"testing"
	"time"
)

func splitters(t *testing.T, cfg Config, names ...string) map[string]*Splitter {
	t.Helper()
	out := map[string]*Splitter{}
	for _, n := range names {
		s, err := NewSplitter(n, cfg, SplitOptions{TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		out[n] = s
	}
	return out
}

// gossip has every gateway publish its demand and every other merge it.
func gossip(now time.Time, sp map[string]*Splitter, demand map[string]map[string]float64) {
	var msgs []GatewayDemand
	for g, s := range sp {
		msgs = append(msgs, s.Local(now, demand[g]))
	}
	for _, m := range msgs {
		for _, s := range sp {
			s.Merge(now, m)
		}
	}
}

// Demand split 90/10 between two gateways: each enforces its part and the
// parts add up to the reservation.
func TestSplitByDemand(t *testing.T) {
	cfg := subs("a", 300.0)
	sp := splitters(t, cfg, "g1", "g2")
	gossip(t0, sp, map[string]map[string]float64{"g1": {"a": 540}, "g2": {"a": 60}})
	f1, f2 := sp["g1"].Fraction(t0, "a"), sp["g2"].Fraction(t0, "a")
	if !within(f1+f2, 1, 1e-9) {
		t.Fatalf("fractions %v + %v != 1", f1, f2)
	}
	// floor 5%: 0.025 + 0.95*0.9
	if !within(f1, 0.025+0.95*0.9, 1e-9) || !within(f2, 0.025+0.95*0.1, 1e-9) {
		t.Errorf("fractions %v, %v; want 0.88 and 0.12", f1, f2)
	}
	// Under-subscribed: each gets its demand and half the slack.
	gossip(t0.Add(time.Millisecond), sp, map[string]map[string]float64{"g1": {"a": 100}, "g2": {"a": 20}})
	slack := (300.0 - 120) / 2
	if got, want := sp["g2"].Fraction(t0.Add(time.Millisecond), "a")*300, 0.05*150+0.95*(20+slack); !within(got, want, 1e-9) {
		t.Errorf("g2 under-subscribed share %v GRPS, want %v", got, want)
	}
}

// A gateway that dies gives its share back once its last report is TTL
// old; before that its share is still counted.
func TestDeadGatewayShareReturnedAfterTTL(t *testing.T) {
	cfg := subs("a", 300.0)
	sp := splitters(t, cfg, "g1", "g2")
	gossip(t0, sp, map[string]map[string]float64{"g1": {"a": 540}, "g2": {"a": 60}})
	// g2 dies; g1 keeps publishing.
	g1 := sp["g1"]
	for d := 100 * time.Millisecond; d <= 2*time.Second; d += 100 * time.Millisecond {
		now := t0.Add(d)
		g1.Local(now, map[string]float64{"a": 600})
		f := g1.Fraction(now, "a")
		switch {
		case d <= time.Second && f > 0.95:
			t.Fatalf("at %v (within TTL) g1 already holds %v of the reservation", d, f)
		case d > time.Second && f != 1:
			t.Fatalf("at %v (past TTL) g1 holds %v, want all of it", d, f)
		}
	}
	if live := g1.Live(t0.Add(2 * time.Second)); len(live) != 1 || live[0] != "g1" {
		t.Errorf("live = %v", live)
	}
}

// Old or replayed gossip does not override newer news, and a gateway's own
// demand is not overridden by gossip about itself.
func TestMergeKeepsNewest(t *testing.T) {
	sp := splitters(t, subs("a", 100.0), "g1", "g2")
	g1 := sp["g1"]
	if !g1.Merge(t0, GatewayDemand{Gateway: "g2", At: t0.Add(time.Second), Demand: map[string]float64{"a": 50}}) {
		t.Fatal("first message not news")
	}
	if g1.Merge(t0, GatewayDemand{Gateway: "g2", At: t0, Demand: map[string]float64{"a": 1000}}) {
		t.Fatal("older message taken")
	}
	if g1.Merge(t0, GatewayDemand{Gateway: "g1", At: t0.Add(time.Hour), Demand: map[string]float64{"a": 1000}}) {
		t.Fatal("gossip about self taken")
	}
	g1.Local(t0, map[string]float64{"a": 50})
	if f := g1.Fraction(t0, "a"); !within(f, 0.5, 1e-9) {
		t.Errorf("fraction %v, want 0.5", f)
	}
	if k := g1.Known(); len(k) != 2 || k[1].Demand["a"] != 50 {
		t.Errorf("known = %+v", k)
	}
}

// A flood at one gateway does not take the capacity the other needs for the
// reservation parts it enforces.
func TestCapacitySplitCoversReservations(t *testing.T) {
	cfg := subs("site1", 250.0, "site3", 50.0)
	sp := splitters(t, cfg, "g1", "g2")
	gossip(t0, sp, map[string]map[string]float64{"g1": {"site3": 4000}, "g2": {"site1": 250}})
	c1, c2 := 760*sp["g1"].CapacityFraction(t0, 760), 760*sp["g2"].CapacityFraction(t0, 760)
	if !within(c1+c2, 760, 1e-9) {
		t.Fatalf("capacity parts %v + %v != 760", c1, c2)
	}
	need := 250 * sp["g2"].Fraction(t0, "site1")
	if c2 < need {
		t.Errorf("g2 gets %.1f GRPS of capacity, below the %.1f of site1's reservation it enforces", c2, need)
	}
}

func TestSplitterApply(t *testing.T) {
	cfg := subs("a", 100.0)
	sp := splitters(t, cfg, "g1", "g2")
	gossip(t0, sp, map[string]map[string]float64{"g1": {"a": 150}, "g2": {"a": 50}})
	s, err := NewCredit(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sp["g1"].Apply(t0, s, DefaultUnit.Times(200)); err != nil {
		t.Fatal(err)
	}
	// g1 enforces 0.025+0.95*0.75 of a's reservation: backlogged, it serves that
	// much plus the spare it holds.
	h := newHarness(t, s, map[string]load{"a": {rate: 1000, use: gru}})
	h.run(time.Second)
	h.measure()
	h.run(2 * time.Second)
	if got, want := h.grps("a"), 200*sp["g1"].CapacityFraction(t0, 200); !within(got, want, 0.02) {
		t.Errorf("served %.1f GRPS, want g1's capacity part %.1f", got, want)
	}
}
