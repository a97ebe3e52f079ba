package schedsim

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"time"

	"github.com/neptune-cluster/neptune/internal/sched"
	"github.com/neptune-cluster/neptune/lab/report"
)

// ClassesOptions are the knobs of `neptune sim classes`.
type ClassesOptions struct {
	// Out is the directory for the CSV and SVG files (it must exist).
	Out string
	// Duration is the simulated time per Fig 4.11 point.
	Duration time.Duration
	Seed     uint64
	// Goal is class-aware's least yield gain over partitioning, in percent,
	// at 200 % demand on 16 nodes.
	Goal float64
}

// DefaultClassesOptions are the defaults of `neptune sim classes`.
func DefaultClassesOptions() ClassesOptions {
	return ClassesOptions{Out: "out", Duration: 300 * time.Second, Seed: 1, Goal: 6}
}

// Validate names the first bad option.
func (o ClassesOptions) Validate() error {
	if o.Duration < 20*time.Second {
		return fmt.Errorf("schedsim: duration must be at least 20s (two partitioning intervals), got %v", o.Duration)
	}
	return nil
}

// RunClasses compares class-aware request distribution with periodic
// server partitioning (dissertation §4.5.3–4.5.4) in a discrete-event
// simulation of a cluster whose nodes run the real ClassScheduler and
// whose clients run internal/balance's polling policy: aggregate yield at
// 75/125/200 % demand on 4–16 nodes (Fig 4.11) and the allocation timeline
// through a demand spike and a server failure (Fig 4.12). It writes CSV
// and SVG files to o.Out. It is `neptune sim classes`.
func RunClasses(ctx context.Context, o ClassesOptions, stdout io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	ok, err := fig411(ctx, stdout, o.Out, o.Duration, o.Seed, o.Goal)
	if err != nil {
		return err
	}
	if err := fig412(ctx, stdout, o.Out, o.Seed); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\ngoal class-aware ≥ %.0f%% more yield than partitioning at 200%% demand, 16 nodes: %s\nwrote %s\n",
		o.Goal, report.Verdict(ok), o.Out)
	return nil
}

// clusterWorkload turns a single-node workload into cluster arrival rates.
func clusterWorkload(wl workload, nodes, workers int, demand float64) clusterConfig {
	cost := make([]float64, len(wl.classes))
	means := wl.classMeans()
	copy(cost, means)
	total := demand * float64(nodes*workers) / wl.mean
	return clusterConfig{
		nodes: nodes, workers: workers, classes: wl.classes, cost: cost,
		rate:     func(k int, _ time.Duration) float64 { return total * wl.mix[k] },
		service:  wl.service,
		interval: 10 * time.Second, window: 2 * time.Second,
	}
}

// classMeans is each class's mean service time in seconds, estimated from
// a fixed sample (the partitioning rule's offline profile).
func (wl workload) classMeans() []float64 {
	rng := rand.New(rand.NewPCG(99, 99))
	m := make([]float64, len(wl.classes))
	const n = 20000
	for k := range m {
		for range n {
			m[k] += wl.service(rng, k).Seconds()
		}
		m[k] /= n
	}
	return m
}

func fig411(ctx context.Context, w io.Writer, out string, dur time.Duration, seed uint64, goal float64) (bool, error) {
	rows := report.NewTable("workload", "nodes", "demand_percent", "scheme", "yield", "normalized")
	fmt.Fprintf(w, "Fig 4.11: aggregate yield, normalized to class-aware at 200%% demand on the same nodes (2 workers per node, %v per point)\n", dur)
	fmt.Fprintf(w, "%-14s %5s %7s %12s %12s %9s\n", "workload", "nodes", "demand", "class-aware", "partitioning", "gain")
	ok := true
	for _, wl := range []workload{microBenchmark(), searchWorkloads()[2]} {
		for _, n := range []int{4, 8, 16} {
			var norm float64
			type point struct{ ca, part float64 }
			var pts []point
			demands := []float64{0.75, 1.25, 2}
			for _, d := range demands {
				var p point
				for _, sc := range []scheme{classAware, partitioning} {
					if err := ctx.Err(); err != nil {
						return false, err
					}
					cfg := clusterWorkload(wl, n, 2, d)
					cfg.scheme, cfg.duration, cfg.seed = sc, dur, seed
					res, err := simulateCluster(cfg)
					if err != nil {
						return false, err
					}
					if sc == classAware {
						p.ca = res.realized
					} else {
						p.part = res.realized
					}
				}
				pts = append(pts, p)
			}
			norm = pts[len(pts)-1].ca
			for i, p := range pts {
				gain := (p.ca/p.part - 1) * 100
				fmt.Fprintf(w, "%-14s %5d %6.0f%% %12.3f %12.3f %+8.1f%%\n", wl.name, n, demands[i]*100, p.ca/norm, p.part/norm, gain)
				for _, r := range []struct {
					s string
					v float64
				}{{"class-aware", p.ca}, {"partitioning", p.part}} {
					rows.Add(wl.name, strconv.Itoa(n), strconv.Itoa(int(demands[i]*100+0.5)), r.s,
						fmt.Sprintf("%.1f", r.v), fmt.Sprintf("%.4f", r.v/norm))
				}
				if n == 16 && demands[i] == 2 && gain < goal {
					ok = false
				}
			}
		}
	}
	return ok, rows.Save(filepath.Join(out, "classes_fig411.csv"))
}

// fig412 is the timeline of §4.5.4: 16 nodes, Differentiated Search with
// fixed-interval arrivals and constant 248 ms service, 20 % guarantees,
// demand 100 % split 10/30/60; silver demand triples between 50 s and
// 150 s; node 0 (gold's first dedicated server under partitioning) is
// down from 200 s to 250 s.
func fig412(ctx context.Context, w io.Writer, out string, seed uint64) error {
	const nodes, workers = 16, 2
	const svc = 248 * time.Millisecond
	wl := searchWorkloads()[2]
	classes := make([]sched.ClassConfig, len(wl.classes))
	copy(classes, wl.classes)
	for k := range classes {
		classes[k].Guarantee = 0.2
	}
	base := float64(nodes*workers) / svc.Seconds()
	rows := report.NewTable("scheme", "time_s", "class", "demand", "allocation")
	fmt.Fprintf(w, "\nFig 4.12: allocation (share of cluster capacity, 2 s windows); silver spike 50-150 s, node 0 down 200-250 s\n")
	fmt.Fprintf(w, "%-12s %-7s %13s %13s %13s %15s\n", "scheme", "class", "alloc 20-50s", "alloc 80-150s", "alloc 160-200", "min 200-220s")
	for _, sc := range []scheme{classAware, partitioning} {
		if err := ctx.Err(); err != nil {
			return err
		}
		cfg := clusterConfig{
			scheme: sc, nodes: nodes, workers: workers, classes: classes,
			cost: []float64{svc.Seconds(), svc.Seconds(), svc.Seconds()},
			rate: func(k int, t time.Duration) float64 {
				r := base * wl.mix[k]
				if k == 1 && t >= 50*time.Second && t < 150*time.Second {
					r *= 3
				}
				return r
			},
			fixed:    true,
			service:  func(*rand.Rand, int) time.Duration { return svc },
			down:     func(i int, t time.Duration) bool { return i == 0 && t >= 200*time.Second && t < 250*time.Second },
			interval: 10 * time.Second, window: 2 * time.Second, duration: 300 * time.Second, seed: seed,
		}
		res, err := simulateCluster(cfg)
		if err != nil {
			return err
		}
		ch := report.Chart{Title: "Fig 4.12 " + sc.String() + ": allocation and demand", XLabel: "time (s)", YLabel: "% of cluster capacity",
			Series: make([]report.Series, 2*len(classes))}
		for k, c := range classes {
			ch.Series[k].Name, ch.Series[len(classes)+k].Name = c.Name+" alloc", c.Name+" demand"
		}
		for win := range len(res.alloc) - 1 {
			for k, c := range classes {
				ch.Series[k].Add(float64(win)*2, res.alloc[win][k]*100)
				ch.Series[len(classes)+k].Add(float64(win)*2, res.demand[win][k]*100)
				rows.Add(sc.String(), strconv.Itoa(win*2), c.Name, fmt.Sprintf("%.4f", res.demand[win][k]), fmt.Sprintf("%.4f", res.alloc[win][k]))
			}
		}
		mean := func(k, from, to int) float64 {
			s := 0.0
			for win := from / 2; win < to/2; win++ {
				s += res.alloc[win][k]
			}
			return s / float64(to/2-from/2) * 100
		}
		for k, c := range classes {
			lo := math.Inf(1)
			for win := 100; win < 110; win++ {
				lo = min(lo, res.alloc[win][k]*100)
			}
			fmt.Fprintf(w, "%-12s %-7s %12.1f%% %12.1f%% %12.1f%% %14.1f%%\n", sc, c.Name, mean(k, 20, 50), mean(k, 80, 150), mean(k, 160, 200), lo)
		}
		if err := ch.Save(filepath.Join(out, "classes_fig412_"+sc.String()+".svg")); err != nil {
			return err
		}
	}
	return rows.Save(filepath.Join(out, "classes_fig412.csv"))
}
