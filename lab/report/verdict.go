package report

import (
	"fmt"
	"math"
	"strings"
)

// Outcome is the verdict on one goal of a benchmark.
type Outcome int

// The three outcomes. INCONCLUSIVE is a result, not a soft PASS: the run
// cannot tell whether the goal holds (a starved client or machine, a
// baseline that is not healthy at the operating point, rounds that
// disagree), and the reasons say what to change before rerunning.
const (
	Pass Outcome = iota + 1
	Fail
	Inconclusive
)

func (o Outcome) String() string {
	switch o {
	case Pass:
		return "PASS"
	case Fail:
		return "FAIL"
	case Inconclusive:
		return "INCONCLUSIVE"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Check is one goal judged against one measurement. The goal (its
// threshold, and the rate or load it is measured at) is fixed before the
// run; Met says whether the measurement met it; Doubts are why the
// measurement cannot decide. Every benchmark's verdict goes through
// Check, so none can print PASS on a cell it flags as starved.
type Check struct {
	// Goal states the goal, e.g. "mean ≤ 1.20× oracle at 90% load".
	Goal string
	// Met is whether the measured value meets the goal.
	Met bool
	// Measured is the figures the verdict rests on.
	Measured string
	// Doubts are the reasons the run cannot decide (empty: it can).
	Doubts []string
}

// Doubt adds a reason (formatted) why the run cannot decide when cond
// holds, and returns c for chaining.
func (c *Check) Doubt(cond bool, format string, args ...any) *Check {
	if cond {
		c.Doubts = append(c.Doubts, fmt.Sprintf(format, args...))
	}
	return c
}

// Outcome is INCONCLUSIVE if there is any doubt, whatever the
// measurement (a starved cell that met the goal met it by accident, one
// that missed it may have missed it for the machine), else PASS or FAIL.
func (c Check) Outcome() Outcome {
	switch {
	case len(c.Doubts) > 0:
		return Inconclusive
	case c.Met:
		return Pass
	}
	return Fail
}

// String is the verdict line: "PASS  goal: measured", with the doubts
// after an INCONCLUSIVE one.
func (c Check) String() string {
	s := fmt.Sprintf("%s  %s: %s", c.Outcome(), c.Goal, c.Measured)
	if len(c.Doubts) > 0 {
		s += " — " + strings.Join(c.Doubts, "; ")
	}
	return s
}

// AtMost is the check of "value ≤ limit"; NaN or an infinite value (a
// ratio to a zero baseline) is a doubt, never a PASS.
func AtMost(goal string, value, limit float64, measured string) *Check {
	c := &Check{Goal: goal, Met: value <= limit, Measured: measured}
	return c.Doubt(math.IsNaN(value) || math.IsInf(value, 0), "the measured value is %v: a baseline is zero or missing", value)
}

// AtLeast is the check of "value ≥ limit", with AtMost's doubts.
func AtLeast(goal string, value, limit float64, measured string) *Check {
	c := &Check{Goal: goal, Met: value >= limit, Measured: measured}
	return c.Doubt(math.IsNaN(value) || math.IsInf(value, 0), "the measured value is %v: a baseline is zero or missing", value)
}

// Rounds judges a goal checked on the whole run (c) and on each round
// alone (rounds): the run decides only if it has at least two rounds and
// every round agrees with it; otherwise the difference may be within the
// run's noise.
func Rounds(c *Check, rounds []bool) *Check {
	passing := 0
	for _, ok := range rounds {
		if ok {
			passing++
		}
	}
	c.Measured += fmt.Sprintf(" (%d/%d rounds meet it)", passing, len(rounds))
	agree := (c.Met && passing == len(rounds)) || (!c.Met && passing == 0)
	c.Doubt(len(rounds) < 2, "one round cannot show the run's noise; run at least 2")
	return c.Doubt(!agree, "rounds disagree: the difference is within this run's noise; run more rounds on a quieter machine")
}

// Outcomes lists the checks' outcomes in order, for tests and summaries.
func Outcomes(checks []*Check) []Outcome {
	out := make([]Outcome, len(checks))
	for i, c := range checks {
		out[i] = c.Outcome()
	}
	return out
}

// Tally counts outcomes: "3 PASS, 1 FAIL, 1 INCONCLUSIVE".
func Tally(checks ...*Check) string {
	n := map[Outcome]int{}
	for _, c := range checks {
		n[c.Outcome()]++
	}
	return fmt.Sprintf("%d PASS, %d FAIL, %d INCONCLUSIVE", n[Pass], n[Fail], n[Inconclusive])
}
