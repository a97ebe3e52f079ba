package lbsim

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// Sections are the parts of `neptune sim lb`, in the order they run.
var Sections = []string{"3.1", "3.2", "3.3", "goals", "async", "push"}

// Run is `neptune sim lb`: it reproduces dissertation Figs 3.1–3.3 and
// checks issue 3's goals, printing tables and writing CSV and SVG files to
// o.Out (which must exist).
func Run(ctx context.Context, o Options, stdout io.Writer) error {
	if o.Duration > 0 {
		// The requests of that much simulated time at the Poisson/Exp rate
		// at 90 % load.
		rate := 0.9 * float64(o.Servers) / PoissonExp.Service.Mean.Seconds()
		o.Requests = int(o.Duration.Seconds() * rate)
	}
	if err := o.Validate(); err != nil {
		return err
	}
	steps := map[string]func(context.Context, Options, io.Writer) error{"3.1": fig31, "3.2": fig32, "3.3": fig33, "goals": goalsAll, "async": asyncSweep, "push": pushSweep}
	for _, f := range Sections {
		if !slices.Contains(o.Sections, f) {
			continue
		}
		start := time.Now()
		if err := steps[f](ctx, o, stdout); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "(%s took %v)\n\n", f, time.Since(start).Round(time.Second))
	}
	fmt.Fprintf(stdout, "wrote CSV and SVG files to %s\n", o.Out)
	return nil
}

// goalsAll runs the goals on the chosen workloads plus the deterministic and
// high-variance service times the issue asks to report.
func goalsAll(ctx context.Context, o Options, stdout io.Writer) error {
	for _, w := range []Workload{Deterministic, HighVariance} {
		if !slices.ContainsFunc(o.Workloads, func(x Workload) bool { return x.Name == w.Name }) {
			o.Workloads = append(o.Workloads, w)
		}
	}
	return goals(ctx, o, stdout)
}
