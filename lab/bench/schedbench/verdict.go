package schedbench

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/neptune-cluster/neptune/internal/sched"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/cpuquota"
	"github.com/neptune-cluster/neptune/lab/report"
)

// minUtil is the share of its quota the node must use in a cell at
// demand ≥ 100% for the cell to count as node-bound: below it the cell
// measured the load generator or the machine, not the scheduler.
const minUtil = 0.8

// maxFailed is the share of a cell's requests that may fail for another
// reason than the deadline or a full queue (a broken connection, a node
// error) before the cell cannot decide.
const maxFailed = 0.01

// cell is what the verdicts read of one policy at one demand level in one
// round.
type cell struct {
	Round, Demand int
	Policy        sched.Policy
	// Control marks the second cell of controlPolicy on the same
	// arrivals: not a contender, the run's measure of its own noise.
	Control bool
	measured
}

// controlPolicy is run twice per round and level; how far its two cells'
// LossPercents differ is what this run can resolve at all.
const controlPolicy = sched.Greedy

// label is the cell's policy, marked "again" for the control.
func (c cell) label() string {
	if c.Control {
		return c.Policy.String() + "-again"
	}
	return c.Policy.String()
}

// measured is what the verdicts read of one measured window: a cell of
// section policies, a phase of a scheme in section classes.
type measured struct {
	// Offered and Realized are the yields of the measured requests.
	Offered, Realized float64
	// Arrivals are the measured requests; Failed of them failed for
	// another reason than the deadline or a full queue.
	Arrivals, Failed int
	// Util is the nodes' CPU over the window ÷ their quotas, Peak the
	// highest of one node's.
	Util, Peak float64
	// Over and Starved are cpuquota's Judgment of the window: a quota
	// did not hold; the machine had too little idle CPU to give the
	// nodes their quotas. Reason says why.
	Over, Starved bool
	Reason        string
	// Lag is the mean lateness of the load generator's sends.
	Lag time.Duration
}

func (m measured) loss() float64 { return sched.LossPercent(m.Offered, m.Realized) }

// verdicts are the run's goals, fixed before it: at every demand level,
// Adaptive's LossPercent (pooled over rounds) at most tolerance points
// above the better of YID's and Greedy's, in every round; the node's CPU
// within its quota in every cell; and the node CPU-bound (≥ minUtil of its
// quota) in every cell at demand ≥ 100%. A level's verdict is INCONCLUSIVE
// when one of its cells ran on a starved machine, broke the quota, was not
// node-bound at demand ≥ 100%, had a late load generator or failed calls,
// or when its rounds disagree (or there is only one). Pure: the table test
// drives it.
func verdicts(tolerance float64, demands []int, cells []cell) []*report.Check {
	var checks []*report.Check
	for _, d := range demands {
		var at []cell
		for _, c := range cells {
			if c.Demand == d {
				at = append(at, c)
			}
		}
		checks = append(checks, levelVerdict(tolerance, d, at))
	}
	ms := make([]measured, len(cells))
	for i, c := range cells {
		ms[i] = c.measured
	}
	return append(checks, quotaVerdict("the node's CPU", "cell", ms), boundVerdict(cells))
}

// gap is Adaptive's LossPercent minus the better of YID's and Greedy's
// over cells (pooled), NaN if a policy has no measured request, and the
// three figures.
func gap(cells []cell) (g, adaptive, yid, greedy float64) {
	loss := func(p sched.Policy) float64 {
		return pooledLoss(cells, func(c cell) (float64, float64, bool) { return c.Offered, c.Realized, c.Policy == p && !c.Control })
	}
	adaptive, yid, greedy = loss(sched.Adaptive), loss(sched.YID), loss(sched.Greedy)
	return adaptive - math.Min(yid, greedy), adaptive, yid, greedy
}

// levelVerdict judges the goal at demand level d on its cells.
func levelVerdict(tolerance float64, d int, cells []cell) *report.Check {
	g, a, y, gr := gap(cells)
	c := report.AtMost(fmt.Sprintf("at %d%% demand: Adaptive's LossPercent ≤ min(YID, Greedy) + %.1f points", d, tolerance), g, tolerance,
		fmt.Sprintf("Adaptive %.2f, YID %.2f, Greedy %.2f: %+.2f", a, y, gr, g))
	c = report.Rounds(c, roundsMet(cells, func(x cell) int { return x.Round }, func(in []cell) bool {
		rg, _, _, _ := gap(in)
		return rg <= tolerance
	}))
	if n := noise(cells); n > tolerance {
		c.Doubt(true, "%s's two cells on the same arrivals differ by %.2f points, more than the %.1f-point tolerance: this run cannot resolve it (more rounds or longer cells)", controlPolicy, n, tolerance)
	}
	var starved, over, unbound, failed []cell
	var lag time.Duration
	for _, x := range cells {
		switch {
		case x.Over:
			over = append(over, x)
		case x.Starved:
			starved = append(starved, x)
		case d >= 100 && x.Util < minUtil:
			unbound = append(unbound, x)
		}
		if float64(x.Failed) > maxFailed*float64(x.Arrivals) {
			failed = append(failed, x)
		}
		lag = max(lag, x.Lag)
	}
	c.Doubt(len(over) > 0, "the node broke its CPU quota in %d cells (first: %s)", len(over), first(over))
	c.Doubt(len(starved) > 0, "%d of %d cells ran on a starved machine (first: %s)", len(starved), len(cells), first(starved))
	c.Doubt(len(unbound) > 0, "%d cells were not node-bound: the node used %s of its quota (< %.0f%%)", len(unbound), utils(unbound), 100*minUtil)
	c.Doubt(len(failed) > 0, "%d cells had more than %.0f%% of their calls fail for another reason than the deadline", len(failed), 100*maxFailed)
	if late, why := bench.Starved("the load generator", lag); late {
		c.Doubt(true, "%s", why)
	}
	return c
}

// quotaVerdict checks that the quotas held: in no window (a cell, a
// phase) did a node use more than its quota beyond cpuquota's tolerance.
// who names the CPU ("the node's CPU"), window the windows.
func quotaVerdict(who, window string, ms []measured) *report.Check {
	worst := math.NaN()
	for _, m := range ms {
		if math.IsNaN(worst) || m.Peak > worst {
			worst = m.Peak
		}
	}
	c := report.AtMost(fmt.Sprintf("%s stayed within its quota (+%.0f%%) in every %s", who, 100*cpuquota.Tolerance, window), worst, 1+cpuquota.Tolerance,
		fmt.Sprintf("at most %.0f%% of the quota over %d %ss", 100*worst, len(ms), window))
	return c.Doubt(len(ms) == 0, "no %s measured", window)
}

// boundVerdict checks that the node was CPU-bound at demand ≥ 100%; cells
// below the bar that ran on a starved machine may have been denied their
// quota, so they cannot decide.
func boundVerdict(cells []cell) *report.Check {
	low, n := math.NaN(), 0
	var starved []cell
	for _, c := range cells {
		if c.Demand < 100 {
			continue
		}
		n++
		if math.IsNaN(low) || c.Util < low {
			low = c.Util
		}
		if c.Util < minUtil && c.Starved {
			starved = append(starved, c)
		}
	}
	c := report.AtLeast(fmt.Sprintf("the node was CPU-bound (≥ %.0f%% of its quota) in every cell at demand ≥ 100%%", 100*minUtil), low, minUtil,
		fmt.Sprintf("at least %.0f%% of the quota over %d cells", 100*low, n))
	c.Doubt(n == 0, "no demand level ≥ 100%%")
	return c.Doubt(len(starved) > 0, "%d cells under the bar ran on a starved machine (first: %s)", len(starved), first(starved))
}

// first names the first of cs and why it was flagged.
func first(cs []cell) string {
	if len(cs) == 0 {
		return ""
	}
	c := cs[0]
	s := fmt.Sprintf("round %d, %s", c.Round+1, c.label())
	if c.Reason != "" {
		s += ": " + c.Reason
	}
	return s
}

// utils lists the cells' quota use, lowest first.
func utils(cs []cell) string {
	us := make([]float64, len(cs))
	for i, c := range cs {
		us[i] = c.Util
	}
	slices.Sort(us)
	s := ""
	for i, u := range us {
		if i == 3 {
			s += ", …"
			break
		}
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%.0f%%", 100*u)
	}
	return s
}

// phaseCell is what the verdicts read of one scheme in one phase of one
// round (section classes).
type phaseCell struct {
	Round  int
	Scheme scheme
	Phase  int
	measured
}

// classesVerdicts are section classes' goals, fixed before the run: in
// every judged phase (the spike, the failure), class-aware's LossPercent,
// pooled over rounds, at most partitioning's (its realized yield at least
// partitioning's on the same arrivals), in every round; and every node
// within its quota in every phase. Pure: the table test drives it.
func classesVerdicts(ps []planPhase, cells []phaseCell) []*report.Check {
	var checks []*report.Check
	for i, p := range ps {
		if !p.Judged {
			continue
		}
		var at []phaseCell
		for _, c := range cells {
			if c.Phase == i {
				at = append(at, c)
			}
		}
		checks = append(checks, phaseVerdict(p, at))
	}
	ms := make([]measured, len(cells))
	for i, c := range cells {
		ms[i] = c.measured
	}
	return append(checks, quotaVerdict("every node's CPU", "phase", ms))
}

// schemeGap is class-aware's LossPercent minus partitioning's over cells
// (pooled), NaN if a scheme has no measured request, and the two figures.
func schemeGap(cells []phaseCell) (gap, aware, parted float64) {
	loss := func(s scheme) float64 {
		return pooledLoss(cells, func(c phaseCell) (float64, float64, bool) { return c.Offered, c.Realized, c.Scheme == s })
	}
	aware, parted = loss(classAware), loss(partitioning)
	return aware - parted, aware, parted
}

// phaseVerdict judges the goal in phase p on its cells. It is
// INCONCLUSIVE when a cell broke a quota, ran on a starved machine or
// with a late load generator, had failed calls outside a failure (a node
// down fails calls by design), or class-aware's nodes were not CPU-bound
// (< minUtil of their quotas: the phase did not load the cluster, so
// both schemes lose little and the comparison shows nothing), or when the
// rounds disagree (or there is only one).
func phaseVerdict(p planPhase, cells []phaseCell) *report.Check {
	g, a, pt := schemeGap(cells)
	c := report.AtMost(fmt.Sprintf("in the %s: class-aware's LossPercent ≤ partitioning's", p.Name), g, 0,
		fmt.Sprintf("class-aware %.2f, partitioning %.2f: %+.2f", a, pt, g))
	c = report.Rounds(c, roundsMet(cells, func(x phaseCell) int { return x.Round }, func(in []phaseCell) bool {
		rg, _, _ := schemeGap(in)
		return rg <= 0
	}))
	var over, starved, unbound, failed int
	var lag time.Duration
	reason := ""
	for _, x := range cells {
		switch {
		case x.Over:
			over++
		case x.Starved:
			starved++
		case x.Scheme == classAware && x.Util < minUtil:
			unbound++
		}
		if reason == "" && (x.Over || x.Starved) {
			reason = fmt.Sprintf("round %d, %s: %s", x.Round+1, x.Scheme, x.Reason)
		}
		if !p.failing() && float64(x.Failed) > maxFailed*float64(x.Arrivals) {
			failed++
		}
		lag = max(lag, x.Lag)
	}
	c.Doubt(over > 0, "a node broke its CPU quota in %d of %d windows (first: %s)", over, len(cells), reason)
	c.Doubt(starved > 0, "%d of %d windows ran on a starved machine (first: %s)", starved, len(cells), reason)
	c.Doubt(unbound > 0, "class-aware's nodes were not CPU-bound (< %.0f%% of their quotas) in %d rounds", 100*minUtil, unbound)
	c.Doubt(failed > 0, "%d windows had more than %.0f%% of their calls fail for another reason than the deadline", failed, 100*maxFailed)
	if late, why := bench.Starved("the load generator", lag); late {
		c.Doubt(true, "%s", why)
	}
	return c
}

// pooledLoss is the LossPercent of the cells yields selects, their offered
// and realized yields summed; NaN if they offered none.
func pooledLoss[C any](cells []C, yields func(C) (offered, realized float64, in bool)) float64 {
	var off, real float64
	for _, c := range cells {
		if o, r, in := yields(c); in {
			off += o
			real += r
		}
	}
	if off == 0 {
		return math.NaN()
	}
	return sched.LossPercent(off, real)
}

// roundsMet says for each round, in ascending order, whether meets holds
// of that round's cells alone.
func roundsMet[C any](cells []C, round func(C) int, meets func([]C) bool) []bool {
	var rounds []int
	for _, x := range cells {
		if !slices.Contains(rounds, round(x)) {
			rounds = append(rounds, round(x))
		}
	}
	slices.Sort(rounds)
	met := make([]bool, len(rounds))
	for i, r := range rounds {
		met[i] = meets(slices.DeleteFunc(slices.Clone(cells), func(x C) bool { return round(x) != r }))
	}
	return met
}

// noise is how far the control's pooled LossPercent is from its twin's
// (controlPolicy's contender cells): the same policy on the same
// arrivals, so only the run's own variation; 0 without control cells.
func noise(cells []cell) float64 {
	twin := pooledLoss(cells, func(c cell) (float64, float64, bool) {
		return c.Offered, c.Realized, c.Policy == controlPolicy && !c.Control
	})
	again := pooledLoss(cells, func(c cell) (float64, float64, bool) { return c.Offered, c.Realized, c.Control })
	if math.IsNaN(twin) || math.IsNaN(again) {
		return 0
	}
	return math.Abs(again - twin)
}
