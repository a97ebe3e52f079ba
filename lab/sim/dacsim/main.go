package dac

import (
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Main runs the DAC simulations (to become `neptune sim dac`): the tree
// schemes versus request rate, homogeneous and heterogeneous (Fig 14–17),
// and LAT from 4 to 512 nodes (Fig 22). It prints side-by-side tables and
// writes CSV and SVG files to -out.
func Main(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("sim dac", flag.ContinueOnError)
	fs.SetOutput(stdout)
	outDir := fs.String("out", "out", "directory for CSV and SVG output")
	exps := fs.String("exp", "trees,scale", "experiments to run: trees, scale")
	seed := fs.Uint64("seed", 1, "random seed")
	window := fs.Duration("duration", 30*time.Second, "simulated measurement window per point")
	quick := fs.Bool("quick", false, "fewer points and, unless -duration is given, a 5 s window")
	fs.Usage = func() {
		fmt.Fprintln(stdout, "usage: neptune sim dac [flags]\n\nSimulates Data Aggregation Calls on the MICRO service (local ~Exp(25ms), reduce ~Exp(5ms)).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	windowSet := false
	fs.Visit(func(f *flag.Flag) { windowSet = windowSet || f.Name == "duration" })
	if *quick && !windowSet {
		*window = 5 * time.Second
	}
	if *window <= 0 {
		return fmt.Errorf("dac: -duration %v must be positive", *window)
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return fmt.Errorf("dac: %w", err)
	}
	base := DefaultSimConfig()
	base.Seed = *seed
	base.Warmup = min(5*time.Second, *window/5)
	base.Duration = base.Warmup + *window
	for _, e := range strings.Split(*exps, ",") {
		var err error
		switch strings.TrimSpace(e) {
		case "trees":
			err = treesExp(ctx, base, *quick, *outDir, stdout)
		case "scale":
			err = scaleExp(ctx, base, *quick, *outDir, stdout)
		default:
			err = fmt.Errorf("dac: -exp: unknown experiment %q (want trees or scale)", e)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

var treeSchemes = []Scheme{Base, Flat, Binomial, LAT}

// treesExp is Fig 14–17: throughput and response time versus request rate
// for each scheme on 24 nodes, all dual-processor or with 4 quad-processor.
func treesExp(ctx context.Context, base SimConfig, quick bool, dir string, w io.Writer) error {
	fracs := []float64{0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2}
	if quick {
		fracs = []float64{0.5, 0.8, 1.0, 1.2}
	}
	capacity := base.IdealThroughput()
	rows := [][]string{{"setting", "scheme", "rate", "throughput", "mean_ms", "p99_ms", "coverage"}}
	for _, setting := range []struct {
		name string
		fast int
	}{{"homogeneous", 0}, {"heterogeneous", 4}} {
		fmt.Fprintf(w, "\n== Fig 14-17 (%s): 24 nodes, %d with 4 CPUs, rest 2; ideal throughput %.1f/s; deadline %v, ρ=%v\n",
			setting.name, setting.fast, func() float64 { c := base; c.FastNodes = setting.fast; return c.IdealThroughput() }(), base.Deadline, base.Quality)
		res := make(map[Scheme][]SimResult)
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
				rows = append(rows, []string{setting.name, s.String(), ff(rate), ff(r.Throughput), fms(r.Mean), fms(r.P99), ff(r.Coverage)})
			}
		}
		fmt.Fprintf(w, "%6s | %-27s | %-31s | %-31s | %s\n", "rate", "throughput/s base flat bin lat", "mean ms base flat bin lat", "p99 ms base flat bin lat", "LAT mean vs flat, bin")
		for i, rate := range rates {
			col := func(s Scheme, d func(SimResult) time.Duration) string {
				if res[s][i].Succeeded == 0 {
					return "-"
				}
				return fms(d(res[s][i]))
			}
			mean := func(r SimResult) time.Duration { return r.Mean }
			p99 := func(r SimResult) time.Duration { return r.P99 }
			fmt.Fprintf(w, "%6.1f | %6.1f %6.1f %6.1f %6.1f | %7s %7s %7s %7s | %7s %7s %7s %7s | %6s %6s\n", rate,
				res[Base][i].Throughput, res[Flat][i].Throughput, res[Binomial][i].Throughput, res[LAT][i].Throughput,
				col(Base, mean), col(Flat, mean), col(Binomial, mean), col(LAT, mean),
				col(Base, p99), col(Flat, p99), col(Binomial, p99), col(LAT, p99),
				reduction(res[LAT][i], res[Flat][i]), reduction(res[LAT][i], res[Binomial][i]))
		}
		// At high load: the highest rate at which Flat, Binomial and LAT all
		// still complete at least half of the calls.
		for i := len(rates) - 1; i >= 0; i-- {
			if ok := func() bool {
				for _, s := range []Scheme{Flat, Binomial, LAT} {
					if res[s][i].Succeeded*2 < res[s][i].Calls {
						return false
					}
				}
				return true
			}(); ok {
				fmt.Fprintf(w, "high load (%.1f/s, highest rate all three complete ≥50%%): LAT mean %s below Flat, %s below Binomial; throughput LAT/Flat %.2f, LAT/Binomial %.2f\n",
					rates[i], reduction(res[LAT][i], res[Flat][i]), reduction(res[LAT][i], res[Binomial][i]),
					res[LAT][i].Throughput/res[Flat][i].Throughput, res[LAT][i].Throughput/res[Binomial][i].Throughput)
				break
			}
		}
		var thr, mean []series
		for _, s := range treeSchemes {
			ts, ms := series{name: s.String(), x: rates}, series{name: s.String()}
			for i, r := range res[s] {
				ts.y = append(ts.y, r.Throughput)
				if r.Succeeded > 0 {
					ms.x, ms.y = append(ms.x, rates[i]), append(ms.y, float64(r.Mean)/1e6)
				}
			}
			thr, mean = append(thr, ts), append(mean, ms)
		}
		if err := writeSVG(filepath.Join(dir, "dac_trees_"+setting.name+"_throughput.svg"), "DAC throughput, "+setting.name+" (Fig 14/16)", "request rate (/s)", "throughput (/s)", false, thr); err != nil {
			return err
		}
		if err := writeSVG(filepath.Join(dir, "dac_trees_"+setting.name+"_response.svg"), "DAC mean response time, "+setting.name+" (Fig 15/17)", "request rate (/s)", "mean response (ms)", false, mean); err != nil {
			return err
		}
	}
	return writeCSV(filepath.Join(dir, "dac_trees.csv"), rows)
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
	rows := [][]string{{"nodes", "demand", "rate", "ideal", "throughput", "mean_ms", "p99_ms", "coverage"}}
	var lines []series
	means := make([][]float64, len(demands))
	for _, d := range demands {
		lines = append(lines, series{name: fmt.Sprintf("%.0f%% demand", d*100)})
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
			rows = append(rows, []string{strconv.Itoa(n), ff(d), ff(c.Rate), ff(ideal), ff(r.Throughput), fms(r.Mean), fms(r.P99), ff(r.Coverage)})
			lines[k].x = append(lines[k].x, float64(n))
			lines[k].y = append(lines[k].y, float64(r.Mean)/1e6)
			means[k] = append(means[k], float64(r.Mean)/1e6)
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
	if err := writeSVG(filepath.Join(dir, "dac_scale.svg"), "DAC LAT mean response time vs nodes (Fig 22)", "nodes (log scale)", "mean response (ms)", true, lines); err != nil {
		return err
	}
	return writeCSV(filepath.Join(dir, "dac_scale.csv"), rows)
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

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("dac: %w", err)
	}
	cw := csv.NewWriter(f)
	if err := cw.WriteAll(rows); err != nil {
		f.Close()
		return fmt.Errorf("dac: %w", err)
	}
	return f.Close()
}
