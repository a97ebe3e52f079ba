package dacsim

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/neptune-cluster/neptune/internal/dac"
	"github.com/neptune-cluster/neptune/lab/report"
)

// Sections are the parts of `neptune sim dac`, in the order they run.
var Sections = []string{"trees", "scale", "loads"}

// Options are the knobs of `neptune sim dac`.
type Options struct {
	// Sections lists the parts to run, of Sections.
	Sections []string
	// Out is the directory for the CSV and SVG files (it must exist).
	Out  string
	Seed uint64
	// Duration is the simulated measurement window per point; zero means
	// 30 s, or 5 s if Quick (10 s in the loads section).
	Duration time.Duration
	// Quick runs fewer points.
	Quick bool
	// Announce is how often nodes announce their loads in the loads
	// section (zero: every second, the yellow pages' refresh), and Polls
	// the ks it tries (fresh polls per call; none: 0, 8 and 16).
	Announce time.Duration
	Polls    []int
}

// DefaultOptions are the defaults of `neptune sim dac`.
func DefaultOptions() Options {
	return Options{Sections: Sections, Out: "out", Seed: 1, Announce: time.Second, Polls: []int{0, dac.SimPolls, 2 * dac.SimPolls}}
}

// Validate names the first bad option.
func (o Options) Validate() error {
	if o.Duration < 0 {
		return fmt.Errorf("dacsim: duration %v must be positive", o.Duration)
	}
	for _, s := range o.Sections {
		if !slices.Contains(Sections, s) {
			return fmt.Errorf("dacsim: unknown section %q (want trees, scale or loads)", s)
		}
	}
	if o.Announce < 0 {
		return fmt.Errorf("dacsim: announce %v must be positive", o.Announce)
	}
	for _, k := range o.Polls {
		if k < 0 {
			return fmt.Errorf("dacsim: polls %d must not be negative", k)
		}
	}
	return nil
}

// Run runs the DAC simulations (`neptune sim dac`): the tree schemes
// versus request rate, homogeneous and heterogeneous (Fig 14–17), LAT
// from 4 to 512 nodes (Fig 22), and LAT on 900 nodes with loads learned
// without polling every node (issue 30). It prints side-by-side tables
// and verdicts and writes CSV and SVG files to o.Out.
func Run(ctx context.Context, o Options, stdout io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	window := o.Duration
	if window == 0 {
		window = 30 * time.Second
		if o.Quick {
			window = 5 * time.Second
		}
	}
	base := DefaultSimConfig()
	base.Seed = o.Seed
	base.Warmup = min(5*time.Second, window/5)
	base.Duration = base.Warmup + window
	for _, e := range Sections {
		if !slices.Contains(o.Sections, e) {
			continue
		}
		var err error
		switch e {
		case "trees":
			err = treesExp(ctx, base, o.Quick, o.Out, stdout)
		case "scale":
			err = scaleExp(ctx, base, o.Quick, o.Out, stdout)
		case "loads":
			lw := o.Duration
			if lw == 0 {
				lw = 10 * time.Second
			}
			if o.Announce == 0 {
				o.Announce = time.Second
			}
			if len(o.Polls) == 0 {
				o.Polls = DefaultOptions().Polls
			}
			_, err = loadsExp(ctx, base, o, lw, stdout)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

var treeSchemes = []dac.Scheme{dac.Base, dac.Flat, dac.Binomial, dac.LAT}

// treesExp is Fig 14–17: throughput and response time versus request rate
// for each scheme on 24 nodes, all dual-processor or with 4 quad-processor.
func treesExp(ctx context.Context, base SimConfig, quick bool, dir string, w io.Writer) error {
	fracs := []float64{0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2}
	if quick {
		fracs = []float64{0.5, 0.8, 1.0, 1.2}
	}
	capacity := base.IdealThroughput()
	rows := report.NewTable("setting", "scheme", "rate", "throughput", "mean_ms", "p99_ms", "coverage")
	for _, setting := range []struct {
		name string
		fast int
	}{{"homogeneous", 0}, {"heterogeneous", 4}} {
		fmt.Fprintf(w, "\n== Fig 14-17 (%s): 24 nodes, %d with 4 CPUs, rest 2; ideal throughput %.1f/s; deadline %v, ρ=%v\n",
			setting.name, setting.fast, func() float64 { c := base; c.FastNodes = setting.fast; return c.IdealThroughput() }(), base.Deadline, base.Quality)
		res := make(map[dac.Scheme][]SimResult)
		var rates []float64
		for _, f := range fracs {
			rate := math.Round(f*capacity*10) / 10
			rates = append(rates, rate)
			for _, s := range treeSchemes {
				if err := ctx.Err(); err != nil {
					return err
				}
				c := base
				c.FastNodes, c.Scheme, c.Rate = setting.fast, s, rate
				r, err := Simulate(c)
				if err != nil {
					return err
				}
				res[s] = append(res[s], r)
				rows.Add(setting.name, s.String(), ff(rate), ff(r.Throughput), fms(r.Mean), fms(r.P99), ff(r.Coverage))
			}
		}
		fmt.Fprintf(w, "%6s | %-27s | %-31s | %-31s | %s\n", "rate", "throughput/s base flat bin lat", "mean ms base flat bin lat", "p99 ms base flat bin lat", "LAT mean vs flat, bin")
		for i, rate := range rates {
			col := func(s dac.Scheme, d func(SimResult) time.Duration) string {
				if res[s][i].Succeeded == 0 {
					return "-"
				}
				return fms(d(res[s][i]))
			}
			mean := func(r SimResult) time.Duration { return r.Mean }
			p99 := func(r SimResult) time.Duration { return r.P99 }
			fmt.Fprintf(w, "%6.1f | %6.1f %6.1f %6.1f %6.1f | %7s %7s %7s %7s | %7s %7s %7s %7s | %6s %6s\n", rate,
				res[dac.Base][i].Throughput, res[dac.Flat][i].Throughput, res[dac.Binomial][i].Throughput, res[dac.LAT][i].Throughput,
				col(dac.Base, mean), col(dac.Flat, mean), col(dac.Binomial, mean), col(dac.LAT, mean),
				col(dac.Base, p99), col(dac.Flat, p99), col(dac.Binomial, p99), col(dac.LAT, p99),
				reduction(res[dac.LAT][i], res[dac.Flat][i]), reduction(res[dac.LAT][i], res[dac.Binomial][i]))
		}
		// At high load: the highest rate at which Flat, Binomial and LAT all
		// still complete at least half of the calls.
		for i := len(rates) - 1; i >= 0; i-- {
			if ok := func() bool {
				for _, s := range []dac.Scheme{dac.Flat, dac.Binomial, dac.LAT} {
					if res[s][i].Succeeded*2 < res[s][i].Calls {
						return false
					}
				}
				return true
			}(); ok {
				fmt.Fprintf(w, "high load (%.1f/s, highest rate all three complete ≥50%%): LAT mean %s below Flat, %s below Binomial; throughput LAT/Flat %.2f, LAT/Binomial %.2f\n",
					rates[i], reduction(res[dac.LAT][i], res[dac.Flat][i]), reduction(res[dac.LAT][i], res[dac.Binomial][i]),
					res[dac.LAT][i].Throughput/res[dac.Flat][i].Throughput, res[dac.LAT][i].Throughput/res[dac.Binomial][i].Throughput)
				break
			}
		}
		thr := report.Chart{Title: "DAC throughput, " + setting.name + " (Fig 14/16)", XLabel: "request rate (/s)", YLabel: "throughput (/s)"}
		mean := report.Chart{Title: "DAC mean response time, " + setting.name + " (Fig 15/17)", XLabel: "request rate (/s)", YLabel: "mean response (ms)"}
		for _, s := range treeSchemes {
			ts, ms := report.Series{Name: s.String()}, report.Series{Name: s.String()}
			for i, r := range res[s] {
				ts.Add(rates[i], r.Throughput)
				if r.Succeeded > 0 {
					ms.Add(rates[i], report.Ms(r.Mean))
				}
			}
			thr.Series, mean.Series = append(thr.Series, ts), append(mean.Series, ms)
		}
		if err := thr.Save(filepath.Join(dir, "dac_trees_"+setting.name+"_throughput.svg")); err != nil {
			return err
		}
		if err := mean.Save(filepath.Join(dir, "dac_trees_"+setting.name+"_response.svg")); err != nil {
			return err
		}
	}
	return rows.Save(filepath.Join(dir, "dac_trees.csv"))
}

// scaleExp is Fig 22: LAT from 4 to 512 nodes at 50–90% of the ideal
// throughput; the response time should grow like log n.
func scaleExp(ctx context.Context, base SimConfig, quick bool, dir string, w io.Writer) error {
	sizes := []int{4, 8, 16, 32, 64, 128, 256, 512}
	demands := []float64{0.5, 0.6, 0.7, 0.8, 0.9}
	if quick {
		sizes = []int{4, 16, 64, 256}
		demands = []float64{0.5, 0.9}
	}
	fmt.Fprintf(w, "\n== Fig 22: LAT, staged timeouts, 2 CPUs per node, demand as a fraction of the ideal throughput nk/(ns+(n-1)r)\n")
	fmt.Fprintf(w, "%5s %8s |", "nodes", "ideal/s")
	for _, d := range demands {
		fmt.Fprintf(w, " thr@%2.0f%% mean@%2.0f%% |", d*100, d*100)
	}
	fmt.Fprintln(w)
	rows := report.NewTable("nodes", "demand", "rate", "ideal", "throughput", "mean_ms", "p99_ms", "coverage")
	ch := report.Chart{Title: "DAC LAT mean response time vs nodes (Fig 22)", XLabel: "nodes (log scale)", YLabel: "mean response (ms)", LogX: true}
	means := make([][]float64, len(demands))
	for _, d := range demands {
		ch.Series = append(ch.Series, report.Series{Name: fmt.Sprintf("%.0f%% demand", d*100)})
	}
	for _, n := range sizes {
		c := base
		c.Nodes = n
		ideal := c.IdealThroughput()
		fmt.Fprintf(w, "%5d %8.1f |", n, ideal)
		for k, d := range demands {
			if err := ctx.Err(); err != nil {
				return err
			}
			c.Rate = d * ideal
			r, err := Simulate(c)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, " %7.1f %8s |", r.Throughput, fms(r.Mean))
			rows.Add(strconv.Itoa(n), ff(d), ff(c.Rate), ff(ideal), ff(r.Throughput), fms(r.Mean), fms(r.P99), ff(r.Coverage))
			ch.Series[k].Add(float64(n), report.Ms(r.Mean))
			means[k] = append(means[k], report.Ms(r.Mean))
		}
		fmt.Fprintln(w)
	}
	xs, logs := make([]float64, len(sizes)), make([]float64, len(sizes))
	for i, n := range sizes {
		xs[i], logs[i] = float64(n), math.Log2(float64(n))
	}
	for k, d := range demands {
		a, b, r2 := fit(logs, means[k])
		_, _, r2lin := fit(xs, means[k])
		fmt.Fprintf(w, "demand %.0f%%: mean ≈ %.1f + %.1f·log2(n) ms, R²=%.3f (linear in n: R²=%.3f); mean(%d)/mean(%d) = %.2f for n ×%d\n",
			d*100, a, b, r2, r2lin, sizes[len(sizes)-1], sizes[0], means[k][len(sizes)-1]/means[k][0], sizes[len(sizes)-1]/sizes[0])
	}
	if err := ch.Save(filepath.Join(dir, "dac_scale.svg")); err != nil {
		return err
	}
	return rows.Save(filepath.Join(dir, "dac_scale.csv"))
}

// fit is the least-squares line y = a + b·x and its R².
func fit(x, y []float64) (a, b, r2 float64) {
	n := float64(len(x))
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx, sy, sxx, sxy = sx+x[i], sy+y[i], sxx+x[i]*x[i], sxy+x[i]*y[i]
	}
	b = (n*sxy - sx*sy) / (n*sxx - sx*sx)
	a = (sy - b*sx) / n
	var ssr, sst float64
	for i := range x {
		e, m := y[i]-(a+b*x[i]), y[i]-sy/n
		ssr, sst = ssr+e*e, sst+m*m
	}
	return a, b, 1 - ssr/sst
}

// reduction is how much lower a's mean response time is than b's.
func reduction(a, b SimResult) string {
	if a.Succeeded == 0 || b.Succeeded == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*(1-float64(a.Mean)/float64(b.Mean)))
}

func fms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) }
func ff(v float64) string        { return strconv.FormatFloat(v, 'f', 3, 64) }
