package faults

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune/internal/replica/check"
)

// Tally adds up schedules' findings.
type Tally struct {
	Schedules, Ops, Acked                  int
	Lost, Duplicated, Divergent, OtherList int
	NonLinearizable, Inconclusive          int
	// LinearizableMissing counts schedules whose binary had no
	// linearizable level (kv ran at level 3; its register is still checked
	// and reported, but the goal cannot be met).
	LinearizableMissing int
	// LeaseMissing counts schedules whose binary had no replication.lease.
	LeaseMissing        int
	Stale               int
	MaxBeyond           time.Duration
	SessionViolations   int
	TwoPrimaryRounds    int
	LongestTwoPrimaries time.Duration
	LSNCollisions       int
	LSNOrder            int
	NotConverged        int
	NoResume            int
	Resume, Failover    []time.Duration
	Settle              []time.Duration
	Unsettled           int
	ResumeBy            map[Kind][]time.Duration
	Examples            []string
}

// Add folds in one schedule.
func (t *Tally) Add(r *Result) {
	t.Schedules++
	t.Ops += r.Ops
	t.Acked += r.Acked
	t.Lost += r.List.Count(check.Lost)
	t.Duplicated += r.List.Count(check.Duplicated)
	t.Divergent += r.List.Count(check.Divergent) + r.KVDivergent
	t.OtherList += r.List.Count(check.Phantom) + r.List.Count(check.Reordered) + r.List.Count(check.RealTime)
	t.NonLinearizable += len(r.Register.NonLinearizable)
	t.Inconclusive += len(r.Register.Timeouts)
	if !r.Linearizable {
		t.LinearizableMissing++
	}
	if !r.LeaseSet {
		t.LeaseMissing++
	}
	t.Stale += len(r.Stale)
	t.MaxBeyond = max(t.MaxBeyond, r.MaxBeyond)
	t.SessionViolations += len(r.Sessions)
	t.TwoPrimaryRounds += r.Primaries.Double
	t.LongestTwoPrimaries = max(t.LongestTwoPrimaries, r.Primaries.Longest)
	t.LSNCollisions += len(r.Collisions)
	t.LSNOrder += len(r.Order)
	if !r.Converged {
		t.NotConverged++
	}
	t.NoResume += r.NoResume
	t.Resume = append(t.Resume, r.Resume...)
	t.Failover = append(t.Failover, r.Failover...)
	t.Settle = append(t.Settle, r.Settle...)
	for k, ds := range r.ResumeBy {
		if t.ResumeBy == nil {
			t.ResumeBy = map[Kind][]time.Duration{}
		}
		t.ResumeBy[k] = append(t.ResumeBy[k], ds...)
	}
	t.Unsettled += r.Unsettled
	ex := func(s string) {
		if len(t.Examples) < 12 {
			t.Examples = append(t.Examples, fmt.Sprintf("seed %d: %s", r.Seed, s))
		}
	}
	if !r.List.Valid() {
		for _, f := range r.List.Examples[:min(3, len(r.List.Examples))] {
			ex(f.String())
		}
	}
	if r.Register.Example != "" {
		ex("non-linearizable " + r.Register.Example)
	}
	for _, v := range r.Stale[:min(2, len(r.Stale))] {
		ex(v.String())
	}
	for _, v := range r.Sessions[:min(1, len(r.Sessions))] {
		ex(v.String())
	}
	for _, v := range r.Collisions[:min(2, len(r.Collisions))] {
		ex(v.String())
	}
	for _, v := range r.Order[:min(2, len(r.Order))] {
		ex(v.String())
	}
	if r.Primaries.Example != "" {
		ex("two primaries: " + r.Primaries.Example)
	}
	if r.ConvergeErr != "" {
		ex(r.ConvergeErr)
	}
}

// Pct is the q-quantile (nearest rank) of ds, 0 if empty.
func Pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s)) + 0.999999)
	return s[min(max(i-1, 0), len(s)-1)]
}

// Goal is one of the goals with its verdict.
type Goal struct {
	Name    string
	Verdict string // PASS, FAIL or INCONCLUSIVE
	Figure  string
}

// GoalTargets are the scale goals; the test uses smaller ones.
type GoalTargets struct {
	Schedules, Acked int
	Lease            time.Duration
}

// SettleGoal bounds how long after a fault ends the yellow pages may show
// a partition without a primary or with two (issue 14).
const SettleGoal = 2 * time.Second

// Goals judges the tally. A goal fails on any finding; one without a
// finding is INCONCLUSIVE when fewer schedules or acknowledged ops than
// the targets ran (or nothing measured it).
func (t *Tally) Goals(g GoalTargets) []Goal {
	enough := t.Schedules >= g.Schedules && t.Acked >= g.Acked
	zero := func(name string, n int, fig string) Goal {
		v := "PASS"
		if n > 0 {
			v = "FAIL"
		} else if !enough {
			v = "INCONCLUSIVE"
		}
		return Goal{name, v, fig}
	}
	lin := zero("non-linearizable", t.NonLinearizable, fmt.Sprintf("%d keys (%d inconclusive searches)", t.NonLinearizable, t.Inconclusive))
	if t.LinearizableMissing > 0 {
		lin = Goal{"non-linearizable", "FAIL", fmt.Sprintf("linearizable level not available (%d schedules ran kv at level 3: %d non-linearizable keys)", t.LinearizableMissing, t.NonLinearizable)}
	}
	out := []Goal{
		zero("lost", t.Lost, fmt.Sprint(t.Lost)),
		zero("duplicated", t.Duplicated, fmt.Sprint(t.Duplicated)),
		zero("divergent", t.Divergent+t.NotConverged, fmt.Sprintf("%d (not converged: %d schedules)", t.Divergent, t.NotConverged)),
		zero("other list anomalies", t.OtherList, fmt.Sprint(t.OtherList)),
		zero("stale beyond bound", t.Stale+t.SessionViolations, fmt.Sprintf("%d reads (worst %v beyond), %d session violations", t.Stale, t.MaxBeyond.Round(time.Millisecond), t.SessionViolations)),
		lin,
		zero("two primaries", t.TwoPrimaryRounds+t.LSNCollisions+t.LSNOrder, fmt.Sprintf("%d sampled rounds (longest %v), %d LSN collisions, %d acks out of LSN order",
			t.TwoPrimaryRounds, t.LongestTwoPrimaries.Round(time.Millisecond), t.LSNCollisions, t.LSNOrder)),
	}
	timed := func(name string, ds []time.Duration, missing int, limit func([]time.Duration) bool, fig string) Goal {
		v := "PASS"
		switch {
		case missing > 0 || (len(ds) > 0 && !limit(ds)):
			v = "FAIL"
		case len(ds) == 0 || !enough:
			v = "INCONCLUSIVE"
		}
		return Goal{name, v, fig}
	}
	bound := g.Lease + time.Second
	out = append(out, timed("writes resume after isolation", t.Resume, t.NoResume, func(ds []time.Duration) bool { return Pct(ds, 1) <= bound },
		fmt.Sprintf("n=%d max %v (goal <= lease+1s = %v), %d faults with no resumed write", len(t.Resume), Pct(t.Resume, 1).Round(time.Millisecond), bound, t.NoResume)))
	out = append(out, timed("one primary after a heal", t.Settle, t.Unsettled, func(ds []time.Duration) bool { return Pct(ds, 1) <= SettleGoal },
		fmt.Sprintf("n=%d max %v (goal <= %v in every client's yellow pages), %d faults not settled by the next", len(t.Settle), Pct(t.Settle, 1).Round(time.Millisecond), SettleGoal, t.Unsettled)))
	out = append(out, timed(failoverGoal, t.Failover, 0, func(ds []time.Duration) bool {
		return Pct(ds, 0.5) <= 500*time.Millisecond && Pct(ds, 0.99) <= 1500*time.Millisecond
	}, fmt.Sprintf("n=%d p50 %v p99 %v (goal <= 500ms, <= 1.5s)", len(t.Failover), Pct(t.Failover, 0.5).Round(time.Millisecond), Pct(t.Failover, 0.99).Round(time.Millisecond))))
	return out
}

// failoverGoal judges percentiles over the whole run's kills, so a single
// schedule's few kills do not decide it (see Result.Finding).
const failoverGoal = "failover after SIGKILL"

// Print writes the tally and the goals.
func (t *Tally) Print(w io.Writer, g GoalTargets) {
	fmt.Fprintf(w, "schedules %d, operations %d, acknowledged %d\n", t.Schedules, t.Ops, t.Acked)
	if t.LeaseMissing > 0 {
		fmt.Fprintf(w, "(%d schedules ran on a binary without replication.lease: no leases; the goals assume a %v lease)\n", t.LeaseMissing, g.Lease)
	}
	for _, goal := range t.Goals(g) {
		fmt.Fprintf(w, "%-13s %-30s %s\n", goal.Verdict, goal.Name, goal.Figure)
	}
	if len(t.ResumeBy) > 0 {
		fmt.Fprint(w, "writes resume, by fault:")
		for _, k := range Kinds {
			if ds := t.ResumeBy[k]; len(ds) > 0 {
				fmt.Fprintf(w, " %s n=%d p50 %v max %v;", k, len(ds), Pct(ds, 0.5).Round(time.Millisecond), Pct(ds, 1).Round(time.Millisecond))
			}
		}
		fmt.Fprintln(w)
	}
	if len(t.Examples) > 0 {
		fmt.Fprintln(w, "examples:")
		for _, e := range t.Examples {
			fmt.Fprintln(w, "  "+strings.ReplaceAll(e, "\n", "\n  "))
		}
	}
}
