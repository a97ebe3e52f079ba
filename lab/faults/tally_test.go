package faults

import (
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/replica/check"
)

func verdicts(t *Tally, g GoalTargets) map[string]string {
	out := map[string]string{}
	for _, goal := range t.Goals(g) {
		out[goal.Name] = goal.Verdict
	}
	return out
}

func TestGoalsVerdicts(t *testing.T) {
	clean := func() *Result {
		return &Result{Linearizable: true, LeaseSet: true, Converged: true, Acked: 60_000, List: &check.ListReport{}, Register: &check.RegisterReport{},
			Resume: []time.Duration{900 * time.Millisecond}, Settle: []time.Duration{time.Second}, Failover: []time.Duration{200 * time.Millisecond, 400 * time.Millisecond}}
	}
	g := GoalTargets{Schedules: 2, Acked: 100_000, Lease: 400 * time.Millisecond}
	var one Tally
	one.Add(clean())
	for name, v := range verdicts(&one, g) {
		if v != "INCONCLUSIVE" {
			t.Errorf("one clean schedule below the scale: %s is %s, want INCONCLUSIVE", name, v)
		}
	}
	one.Add(clean())
	for name, v := range verdicts(&one, g) {
		if v != "PASS" {
			t.Errorf("two clean schedules at scale: %s is %s, want PASS", name, v)
		}
	}
	bad := clean()
	bad.Linearizable = false
	bad.Stale = []check.Violation{{Rule: "staleness"}}
	bad.Primaries.Double = 3
	bad.Resume = []time.Duration{2 * time.Second}
	bad.Failover = []time.Duration{2 * time.Second}
	bad.Settle = []time.Duration{3 * time.Second}
	bad.Converged = false
	var b Tally
	b.Add(bad)
	v := verdicts(&b, g)
	for _, name := range []string{"stale beyond bound", "non-linearizable", "two primaries", "writes resume after isolation", "one primary after a heal", "failover after SIGKILL", "divergent"} {
		if v[name] != "FAIL" {
			t.Errorf("%s is %s, want FAIL", name, v[name])
		}
	}
	if v["lost"] != "INCONCLUSIVE" {
		t.Errorf("lost is %s, want INCONCLUSIVE", v["lost"])
	}
	if f := clean().Finding(g.Lease); f != "" {
		t.Errorf("a clean schedule's finding is %q, want none", f)
	}
	if f, want := bad.Finding(g.Lease), "divergent, stale beyond bound, non-linearizable, two primaries, writes resume after isolation, one primary after a heal"; f != want {
		t.Errorf("finding %q, want %q", f, want)
	}
}

// TestSettleMeasuresTheFirstStableView: a fault settles when every
// client's view shows one primary per partition for stableFor; the time
// is when that stretch began. A view that never settles before the next
// fault counts the fault as unsettled.
func TestSettleMeasuresTheFirstStableView(t *testing.T) {
	t0 := time.Unix(1000, 0)
	events := []Event{
		{Start: t0.Add(-time.Second), Healed: t0},
		{Start: t0.Add(5 * time.Second), Healed: t0.Add(6 * time.Second)},
	}
	var views []Record
	sample := func(c string, from, to time.Duration, v string) {
		for d := from; d < to; d += 100 * time.Millisecond {
			views = append(views, Record{W: viewSample, C: c, K: "kv", P: 0, V: v, S: t0.Add(d).UnixNano()})
		}
	}
	sample("c1", 0, 700*time.Millisecond, "n1,n2") // the old primary's stale claim
	sample("c1", 700*time.Millisecond, 900*time.Millisecond, "n2")
	sample("c1", 900*time.Millisecond, time.Second, "")
	sample("c1", time.Second, 3*time.Second, "n2")
	sample("c1", 3*time.Second, 3100*time.Millisecond, "n1,n2") // a later transfer: not counted
	sample("c1", 3100*time.Millisecond, 5*time.Second, "n1")
	sample("c2", 0, 5*time.Second, "n2")
	// After the second fault, c2 never sees one primary for long.
	sample("c2", 6*time.Second, 9*time.Second, "n2,n3")
	sample("c1", 6*time.Second, 9*time.Second, "n3")
	ds, unsettled := settle(events, views)
	if len(ds) != 1 || ds[0] != time.Second || unsettled != 1 {
		t.Fatalf("settle = %v, %d unsettled; want [1s], 1", ds, unsettled)
	}
}
