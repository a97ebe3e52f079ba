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
			Resume: []time.Duration{900 * time.Millisecond}, Failover: []time.Duration{200 * time.Millisecond, 400 * time.Millisecond}}
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
	bad.Converged = false
	var b Tally
	b.Add(bad)
	v := verdicts(&b, g)
	for _, name := range []string{"stale beyond bound", "non-linearizable", "two primaries", "writes resume after isolation", "failover after SIGKILL", "divergent"} {
		if v[name] != "FAIL" {
			t.Errorf("%s is %s, want FAIL", name, v[name])
		}
	}
	if v["lost"] != "INCONCLUSIVE" {
		t.Errorf("lost is %s, want INCONCLUSIVE", v["lost"])
	}
}
