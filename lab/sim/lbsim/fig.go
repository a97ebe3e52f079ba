package sim

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/neptune-cluster/neptune/internal/balance"
)

// Options are the knobs shared by the figure experiments.
type Options struct {
	Workloads []Workload
	Loads     []float64
	Servers   int
	Clients   int
	Requests  int // measured per run; a tenth as many more warm up
	Seed      uint64
	Out       string
}

func (o Options) config(w Workload, load float64, pol balance.Config) Config {
	c := DefaultConfig()
	c.Workload, c.Load, c.Servers, c.Clients = w, load, o.Servers, o.Clients
	c.Requests, c.Warmup, c.Seed, c.Policy = o.Requests, o.Requests/10, o.Seed, pol
	return c
}

// runAll simulates cfgs on all cores; results are in cfgs' order.
func runAll(ctx context.Context, cfgs []Config) ([]Result, error) {
	res := make([]Result, len(cfgs))
	errs := make([]error, len(cfgs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range next {
				res[i], errs[i] = Run(cfgs[i])
			}
		})
	}
feed:
	for i := range cfgs {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return res, nil
}

func policy(name string, edit func(*balance.Config)) balance.Config {
	c := balance.DefaultConfig()
	c.Policy = name
	if edit != nil {
		edit(&c)
	}
	return c
}

// Inaccuracy returns Fig 3.1's load-index inaccuracy of one FIFO server
// under workload w at the given load: the mean of |q(t+Δ) − q(t)| over
// random t, for each Δ in delays, from n requests.
func Inaccuracy(w Workload, load float64, delays []time.Duration, n int, seed uint64) []float64 {
	reqs := trace(w, load, 1, n, seed)
	arr := make([]time.Duration, n)
	dep := make([]time.Duration, n)
	var free time.Duration
	for i, r := range reqs {
		free = max(free, r.arrive) + r.service
		arr[i], dep[i] = r.arrive, free
	}
	queue := func(t time.Duration) int {
		a, _ := slices.BinarySearch(arr, t+1)
		d, _ := slices.BinarySearch(dep, t+1)
		return a - d
	}
	rng := rand.New(rand.NewPCG(seed, 0xf31))
	const samples = 50_000
	out := make([]float64, len(delays))
	for k, delta := range delays {
		lo, hi := arr[n/10], arr[n-1]-delta
		if hi <= lo {
			out[k] = math.NaN()
			continue
		}
		sum := 0
		for range samples {
			t := lo + time.Duration(rng.Int64N(int64(hi-lo)))
			sum += abs(queue(t+delta) - queue(t))
		}
		out[k] = float64(sum) / samples
	}
	return out
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// InaccuracyBound is the dissertation's eq. 3.2.1: the mean difference of an
// M/M/1 queue length at two independent times, 2ρ/(1−ρ²).
func InaccuracyBound(rho float64) float64 { return 2 * rho / (1 - rho*rho) }

// fig31 reproduces Fig 3.1: load-index inaccuracy against delay, one server.
func fig31(ctx context.Context, o Options, stdout io.Writer) error {
	mults := []float64{0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100}
	var rows [][]string
	for _, load := range o.Loads {
		ch := chart{title: fmt.Sprintf("Fig 3.1: load index inaccuracy, 1 server, %g%% busy", 100*load),
			xlabel: "delay / mean service time", ylabel: "mean |q(t+Δ) − q(t)|", logX: true}
		for _, w := range o.Workloads {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("sim: %w", err)
			}
			delays := make([]time.Duration, len(mults))
			for i, m := range mults {
				delays[i] = time.Duration(m * float64(w.Service.Mean))
			}
			inacc := Inaccuracy(w, load, delays, 10*o.Requests, o.Seed)
			ch.lines = append(ch.lines, series{name: w.Name, x: mults, y: inacc})
			for i, m := range mults {
				rows = append(rows, []string{w.Name, ftoa(load), ftoa(m), ftoa(inacc[i]), ftoa(InaccuracyBound(load))})
			}
		}
		bound := make([]float64, len(mults))
		for i := range bound {
			bound[i] = InaccuracyBound(load)
		}
		ch.lines = append(ch.lines, series{name: "bound 2ρ/(1−ρ²)", x: mults, y: bound})
		if err := writeSVG(o.Out, fmt.Sprintf("fig3.1-load%02.0f.svg", 100*load), ch); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, "Fig 3.1 — load-index inaccuracy vs delay (1 server)")
	printRows(stdout, []string{"workload", "load", "delay/svc", "inaccuracy", "bound"}, rows)
	return writeCSV(o.Out, "fig3.1.csv", []string{"workload", "load", "delay_over_service", "inaccuracy", "bound"}, rows)
}

// fig32 reproduces Fig 3.2: broadcast at mean intervals of 31.25 ms to 1 s,
// mean response normalised to the oracle.
func fig32(ctx context.Context, o Options, stdout io.Writer) error {
	intervals := []time.Duration{31250 * time.Microsecond, 62500 * time.Microsecond, 125 * time.Millisecond,
		250 * time.Millisecond, 500 * time.Millisecond, time.Second}
	var cfgs []Config
	for _, load := range o.Loads {
		for _, w := range o.Workloads {
			cfgs = append(cfgs, o.config(w, load, policy(balance.NameOracle, nil)))
			for _, iv := range intervals {
				cfgs = append(cfgs, o.config(w, load, policy(balance.NameBroadcast, func(c *balance.Config) { c.BroadcastInterval = iv })))
			}
		}
	}
	res, err := runAll(ctx, cfgs)
	if err != nil {
		return err
	}
	var rows [][]string
	xs := make([]float64, len(intervals))
	for i, iv := range intervals {
		xs[i] = float64(iv) / float64(time.Millisecond)
	}
	k := 0
	for _, load := range o.Loads {
		ch := chart{title: fmt.Sprintf("Fig 3.2: broadcast, 16 servers, %g%% busy", 100*load),
			xlabel: "mean broadcast interval (ms)", ylabel: "mean response / ideal", logX: true}
		for _, w := range o.Workloads {
			oracle := res[k]
			k++
			ys := make([]float64, len(intervals))
			for i := range intervals {
				ys[i], _ = res[k].Ratio(oracle)
				rows = append(rows, []string{w.Name, ftoa(load), ftoa(xs[i]), ms(res[k].Mean), ms(oracle.Mean), ftoa(ys[i])})
				k++
			}
			ch.lines = append(ch.lines, series{name: w.Name, x: xs, y: ys})
		}
		if err := writeSVG(o.Out, fmt.Sprintf("fig3.2-load%02.0f.svg", 100*load), ch); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, "Fig 3.2 — broadcast interval (mean response normalised to the oracle)")
	printRows(stdout, []string{"workload", "load", "interval ms", "mean ms", "oracle ms", "ratio"}, rows)
	return writeCSV(o.Out, "fig3.2.csv", []string{"workload", "load", "interval_ms", "mean_ms", "oracle_ms", "ratio"}, rows)
}

// contender is a named policy configuration in a comparison.
type contender struct {
	name string
	cfg  balance.Config
}

func pollingD(d int) contender {
	return contender{fmt.Sprintf("poll-%d", d), policy(balance.NamePolling, func(c *balance.Config) { c.PollSize = d })}
}

// fig33 reproduces Fig 3.3: random, poll sizes 2/3/4/8, the ideal (oracle),
// and our default, normalised to the oracle.
func fig33(ctx context.Context, o Options, stdout io.Writer) error {
	cons := []contender{{"random", policy(balance.NameRandom, nil)}, pollingD(2), pollingD(3), pollingD(4), pollingD(8),
		{"ideal", policy(balance.NameOracle, nil)}, {"prequal", policy(balance.NamePrequal, nil)}}
	var cfgs []Config
	for _, load := range o.Loads {
		for _, w := range o.Workloads {
			for _, c := range cons {
				cfgs = append(cfgs, o.config(w, load, c.cfg))
			}
		}
	}
	res, err := runAll(ctx, cfgs)
	if err != nil {
		return err
	}
	labels := make([]string, len(cons))
	xs := make([]float64, len(cons))
	for i, c := range cons {
		labels[i], xs[i] = c.name, float64(i)
	}
	var rows [][]string
	k := 0
	for _, load := range o.Loads {
		ch := chart{title: fmt.Sprintf("Fig 3.3: poll size, 16 servers, %g%% busy", 100*load),
			xlabel: "policy", ylabel: "mean response / ideal", xticks: labels}
		for _, w := range o.Workloads {
			oracle := res[k+slices.IndexFunc(cons, func(c contender) bool { return c.name == "ideal" })]
			ys := make([]float64, len(cons))
			for i, c := range cons {
				r := res[k+i]
				ys[i], _ = r.Ratio(oracle)
				rows = append(rows, []string{w.Name, ftoa(load), c.name, ms(r.Mean), ms(r.P99), ftoa(ys[i]), ftoa(r.PollsPerRequest)})
			}
			k += len(cons)
			ch.lines = append(ch.lines, series{name: w.Name, x: xs, y: ys})
		}
		if err := writeSVG(o.Out, fmt.Sprintf("fig3.3-load%02.0f.svg", 100*load), ch); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, "Fig 3.3 — poll size (mean response normalised to the ideal/oracle)")
	head := []string{"workload", "load", "policy", "mean ms", "p99 ms", "mean/ideal", "polls/req"}
	printRows(stdout, head, rows)
	return writeCSV(o.Out, "fig3.3.csv", head, rows)
}

// goals runs issue 3's goals side by side at 90% load and prints every
// contender normalised to the oracle, then the goal checks.
func goals(ctx context.Context, o Options, stdout io.Writer) error {
	const load = 0.9
	def := balance.DefaultConfig()
	cons := []contender{
		{"oracle", policy(balance.NameOracle, nil)},
		{"default:" + def.Policy, def},
		pollingD(3), pollingD(def.ProbeSize),
		{"localp2c", policy(balance.NameLocalP2C, nil)},
		{"broadcast-1s", policy(balance.NameBroadcast, func(c *balance.Config) { c.BroadcastInterval = time.Second })},
		{"random", policy(balance.NameRandom, nil)},
	}
	var cfgs []Config
	for _, w := range o.Workloads {
		for _, c := range cons {
			cfgs = append(cfgs, o.config(w, load, c.cfg))
		}
	}
	// One replica 10× slower, at the same load relative to capacity.
	slowCons := []contender{cons[0], cons[1], cons[2], cons[3]}
	for _, c := range slowCons {
		cfg := o.config(PoissonExp, load, c.cfg)
		cfg.SlowServers, cfg.SlowFactor = 1, 10
		cfgs = append(cfgs, cfg)
	}
	res, err := runAll(ctx, cfgs)
	if err != nil {
		return err
	}
	head := []string{"workload", "policy", "mean ms", "p99 ms", "mean/oracle", "p99/oracle", "polls/req"}
	var rows [][]string
	byName := map[string]Result{}
	for i, w := range o.Workloads {
		oracle := res[i*len(cons)]
		for j, c := range cons {
			r := res[i*len(cons)+j]
			byName[w.Name+"/"+c.name] = r
			m, p := r.Ratio(oracle)
			rows = append(rows, []string{w.Name, c.name, ms(r.Mean), ms(r.P99), ftoa(m), ftoa(p), ftoa(r.PollsPerRequest)})
		}
	}
	slow := res[len(o.Workloads)*len(cons):]
	for j, c := range slowCons {
		r := slow[j]
		byName["exp-slow/"+c.name] = r
		m, p := r.Ratio(slow[0])
		rows = append(rows, []string{"exp, 1 replica 10× slower", c.name, ms(r.Mean), ms(r.P99), ftoa(m), ftoa(p), ftoa(r.PollsPerRequest)})
	}
	fmt.Fprintf(stdout, "Goals — %g%% load, %d servers, %d clients, %d requests per run (ratios to the oracle of the same row group)\n",
		100*load, o.Servers, o.Clients, o.Requests)
	printRows(stdout, head, rows)
	if err := writeCSV(o.Out, "goals.csv", head, rows); err != nil {
		return err
	}
	dn := cons[1].name
	check := func(goal string, ok bool, format string, args ...any) {
		verdict := "MET"
		if !ok {
			verdict = "MISSED"
		}
		fmt.Fprintf(stdout, "%-6s  %-58s  %s\n", verdict, goal, fmt.Sprintf(format, args...))
	}
	fmt.Fprintln(stdout)
	for _, w := range o.Workloads {
		d, ok := byName[w.Name+"/"+dn]
		if !ok {
			continue
		}
		m, p := d.Ratio(byName[w.Name+"/oracle"])
		check(fmt.Sprintf("%s: default mean ≤ 1.2× oracle, p99 ≤ 1.35×", w.Name), m <= 1.2 && p <= 1.35, "mean %.3f×, p99 %.3f×", m, p)
	}
	if d, ok := byName["exp/"+dn]; ok {
		l := byName["exp/localp2c"]
		check(fmt.Sprintf("exp: default mean ≥ 2× better than localp2c (%d clients)", o.Clients), l.Mean >= 2*d.Mean,
			"localp2c/default %.2f×", float64(l.Mean)/float64(d.Mean))
		h, s := d, byName["exp-slow/"+dn]
		check("exp: one replica 10× slower, default p99 ≤ 1.5× healthy", s.P99 <= h.P99*3/2,
			"%.3f× (%s vs %s ms)", float64(s.P99)/float64(h.P99), ms(s.P99), ms(h.P99))
	}
	if d, ok := byName["fine/"+dn]; ok {
		b := byName["fine/broadcast-1s"]
		check("fine: default mean ≥ 5× better than broadcast-1s", b.Mean >= 5*d.Mean,
			"broadcast/default %.2f×", float64(b.Mean)/float64(d.Mean))
	}
	return nil
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64)
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', 4, 64) }

func printRows(w io.Writer, head []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, r := range append([][]string{head}, rows...) {
		for _, c := range r {
			fmt.Fprint(tw, c, "\t")
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(w)
}

func writeCSV(dir, name string, head []string, rows [][]string) error {
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	cw := csv.NewWriter(f)
	cw.Write(head)
	cw.WriteAll(rows) // flushes
	if err := cw.Error(); err != nil {
		f.Close()
		return fmt.Errorf("sim: write %s: %w", name, err)
	}
	return f.Close()
}

func writeSVG(dir, name string, c chart) error {
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if err := c.writeSVG(f); err != nil {
		f.Close()
		return fmt.Errorf("sim: write %s: %w", name, err)
	}
	return f.Close()
}
