package repsim

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune/lab/report"
)

// Options are `neptune sim replication`'s knobs.
type Options struct {
	// Base is every run's configuration but Degree, Imbalance and Rate.
	Base Config
	// Degrees and Factors are Fig 5.2's curves and x axis.
	Degrees []int
	Factors []float64
	// Seeds are the independent rounds (arrivals, service times,
	// policies); each goal must hold in every one.
	Seeds int
	// Steps of the bisection for the highest rate at which OnTime of the
	// requests are answered within the deadline (the paper: 98%).
	Steps  int
	OnTime float64
	// Goal is the least degree-4-over-NoRep throughput at imbalance 1
	// (the paper: "almost three times").
	Goal float64
	Out  string
}

// DefaultOptions: the paper's degrees (NoRep, 2, 3, 4) and imbalance
// factors from 1/64 doubling to 1, two rounds.
func DefaultOptions() Options {
	o := Options{Base: DefaultConfig(), Degrees: []int{1, 2, 3, 4}, Seeds: 2, Steps: 9, OnTime: 0.98, Goal: 2.5, Out: "out"}
	for f := 1.0 / 64; f < 1; f *= 2 {
		o.Factors = append(o.Factors, f)
	}
	o.Factors = append(o.Factors, 1)
	return o
}

// Validate names the first bad option.
func (o Options) Validate() error {
	switch {
	case len(o.Degrees) == 0 || len(o.Factors) == 0:
		return fmt.Errorf("repsim: degrees and factors must not be empty")
	case !slices.Contains(o.Degrees, 1) || !slices.Contains(o.Degrees, 4):
		return fmt.Errorf("repsim: degrees must include 1 (NoRep) and 4, the goals compare them; got %v", o.Degrees)
	case !slices.Contains(o.Factors, 1) || slices.Min(o.Factors) > 1/float64(o.Base.Partitions):
		return fmt.Errorf("repsim: factors must include 1 and 1/partitions (%g), the goals are judged there; got %v", 1/float64(o.Base.Partitions), o.Factors)
	case o.Seeds < 1 || o.Steps < 3:
		return fmt.Errorf("repsim: seeds must be >= 1 and steps >= 3, got %d and %d", o.Seeds, o.Steps)
	case o.OnTime <= 0 || o.OnTime > 1:
		return fmt.Errorf("repsim: on-time fraction must be in (0, 1], got %g", o.OnTime)
	}
	for _, d := range o.Degrees {
		c := o.Base
		c.Degree = d
		if err := c.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Bracket is a bisection's result: the highest rate tried that met the
// on-time goal and the lowest that did not.
type Bracket struct{ Lo, Hi float64 }

// Mid is the bracket's middle, the figure's value.
func (b Bracket) Mid() float64 { return (b.Lo + b.Hi) / 2 }

// MaxThroughput bisects the offered rate for the highest at which at
// least onTime of the requests are answered within the deadline.
func MaxThroughput(cfg Config, onTime float64, steps int) (Bracket, error) {
	mean := cfg.WriteFraction*cfg.Write.Seconds() + (1-cfg.WriteFraction)*cfg.Read.Seconds()
	b := Bracket{Hi: 1.5 * float64(cfg.Nodes) / mean} // more than the cluster can do without replication
	for range steps {
		cfg.Rate = b.Mid()
		res, err := Simulate(cfg)
		if err != nil {
			return Bracket{}, err
		}
		if res.OnTimeFraction() >= onTime {
			b.Lo = cfg.Rate
		} else {
			b.Hi = cfg.Rate
		}
	}
	return b, nil
}

// Run is `neptune sim replication`: Fig 5.2's throughput against the
// imbalance factor for each degree, its table, CSV and SVG, and the
// goals judged PASS, FAIL or INCONCLUSIVE.
func Run(ctx context.Context, o Options, stdout io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	start := time.Now()
	type cell struct {
		seed   int
		degree int
		factor float64
	}
	var cells []cell
	for s := range o.Seeds {
		for _, d := range o.Degrees {
			for _, f := range o.Factors {
				cells = append(cells, cell{s, d, f})
			}
		}
	}
	got := make([]Bracket, len(cells))
	errs := make([]error, len(cells))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, c := range cells {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if ctx.Err() != nil {
				errs[i] = ctx.Err()
				return
			}
			cfg := o.Base
			cfg.Degree, cfg.Imbalance, cfg.Seed = c.degree, c.factor, o.Base.Seed+uint64(c.seed)
			got[i], errs[i] = MaxThroughput(cfg, o.OnTime, o.Steps)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	at := func(seed, degree int, factor float64) Bracket {
		i := slices.IndexFunc(cells, func(c cell) bool { return c.seed == seed && c.degree == degree && c.factor == factor })
		return got[i]
	}
	mean := func(degree int, factor float64) float64 {
		s := 0.0
		for seed := range o.Seeds {
			s += at(seed, degree, factor).Mid()
		}
		return s / float64(o.Seeds)
	}

	fmt.Fprintf(stdout, "Fig 5.2: highest throughput (req/s) with ≥ %.0f%% answered within %v, %d nodes, %d partitions, %.0f%% writes, level 2; mean of %d rounds\n",
		100*o.OnTime, o.Base.Deadline, o.Base.Nodes, o.Base.Partitions, 100*o.Base.WriteFraction, o.Seeds)
	hdr := []string{"imbalance"}
	for _, d := range o.Degrees {
		hdr = append(hdr, degreeName(d))
	}
	hdr = append(hdr, "deg4/NoRep")
	tab := report.NewTable(hdr...)
	chart := report.Chart{Title: "Fig 5.2: throughput vs workload imbalance (8 nodes, 10% writes, level 2)",
		XLabel: "workload imbalance factor (share of the most popular partition)", YLabel: "throughput (req/s)", LogX: true}
	series := map[int]*report.Series{}
	for _, d := range o.Degrees {
		series[d] = &report.Series{Name: degreeName(d)}
	}
	for _, f := range o.Factors {
		row := []string{factorName(f)}
		for _, d := range o.Degrees {
			v := mean(d, f)
			row = append(row, fmt.Sprintf("%.0f", v))
			series[d].Add(f, v)
		}
		row = append(row, fmt.Sprintf("%.2f", mean(4, f)/mean(1, f)))
		tab.Add(row...)
	}
	for _, d := range o.Degrees {
		chart.Series = append(chart.Series, *series[d])
	}
	tab.Print(stdout)

	// The goals, fixed before the run, judged on the means and in each round.
	ratio := func(a, b Bracket) (lo, mid, hi float64) { return a.Lo / b.Hi, a.Mid() / b.Mid(), a.Hi / b.Lo }
	bal := 1 / float64(o.Base.Partitions)
	var g1r, g2r, g3r []bool
	var g1 []string
	straddles := false
	for seed := range o.Seeds {
		lo, mid, hi := ratio(at(seed, 4, 1), at(seed, 1, 1))
		g1r = append(g1r, mid >= o.Goal)
		g1 = append(g1, fmt.Sprintf("%.2f", mid))
		straddles = straddles || lo < o.Goal && o.Goal <= hi
		_, m2, _ := ratio(at(seed, 1, bal), at(seed, 4, bal))
		g2r = append(g2r, m2 >= 1)
		ok := true
		ds := slices.Sorted(slices.Values(o.Degrees))
		for i := 1; i < len(ds); i++ {
			ok = ok && at(seed, ds[i], 1).Lo >= at(seed, ds[i-1], 1).Hi
		}
		g3r = append(g3r, ok)
	}
	c1 := report.AtLeast(fmt.Sprintf("degree 4 ≥ %.1f× NoRep at imbalance 1 (paper: almost 3×)", o.Goal), mean(4, 1)/mean(1, 1), o.Goal,
		fmt.Sprintf("%.2f× (rounds %v)", mean(4, 1)/mean(1, 1), g1))
	c1.Doubt(straddles, "the bisection's brackets straddle the goal: raise --steps")
	c1 = report.Rounds(c1, g1r)
	c2 := report.Rounds(report.AtLeast("NoRep ≥ degree 4 at imbalance 1/64 (replication's extra writes cost throughput under balanced load)",
		mean(1, bal)/mean(4, bal), 1, fmt.Sprintf("NoRep/degree 4 = %.2f", mean(1, bal)/mean(4, bal))), g2r)
	ordered := true
	for i := 1; i < len(o.Degrees); i++ {
		ordered = ordered && mean(slices.Sorted(slices.Values(o.Degrees))[i], 1) > mean(slices.Sorted(slices.Values(o.Degrees))[i-1], 1)
	}
	var at1 []string
	for _, d := range slices.Sorted(slices.Values(o.Degrees)) {
		at1 = append(at1, fmt.Sprintf("%s %.0f", degreeName(d), mean(d, 1)))
	}
	c3 := report.Rounds(&report.Check{Goal: "at imbalance 1 each degree is faster than the one below, brackets apart (hot spot spread over more replicas)",
		Met: ordered, Measured: fmt.Sprint(at1)}, g3r)
	fmt.Fprintln(stdout)
	for _, c := range []*report.Check{c1, c2, c3} {
		fmt.Fprintln(stdout, c)
	}
	fmt.Fprintf(stdout, "%s (simulated; %d runs in %v)\n", report.Tally(c1, c2, c3), len(cells)*o.Steps, time.Since(start).Round(time.Second))
	if o.Out == "" {
		return nil
	}
	if err := tab.Save(filepath.Join(o.Out, "fig5.2-sim.csv")); err != nil {
		return err
	}
	if err := chart.Save(filepath.Join(o.Out, "fig5.2-sim.svg")); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s\n", filepath.Join(o.Out, "fig5.2-sim.csv"), filepath.Join(o.Out, "fig5.2-sim.svg"))
	return nil
}

func degreeName(d int) string {
	if d == 1 {
		return "NoRep"
	}
	return fmt.Sprintf("degree %d", d)
}

func factorName(f float64) string {
	if n := math.Round(1 / f); math.Abs(1/f-n) < 1e-9 {
		return fmt.Sprintf("1/%.0f", n)
	}
	return fmt.Sprintf("%.3f", f)
}
