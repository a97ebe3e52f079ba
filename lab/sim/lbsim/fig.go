package lbsim

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/lab/report"
	"github.com/neptune-cluster/neptune/lab/sim"
)

// Options are the knobs shared by the figure experiments.
type Options struct {
	// Sections lists the parts to run, of Sections.
	Sections  []string
	Workloads []Workload
	// Loads are the offered loads of the figures (the goals run at 0.9).
	Loads   []float64
	Servers int
	Clients int
	// Requests are measured per run; a tenth as many more warm up.
	Requests int
	// Duration, if set, replaces Requests by the requests of that much
	// simulated time at the Poisson/Exp rate at 90 % load.
	Duration time.Duration
	Seed     uint64
	// Out is the directory for the CSV and SVG files.
	Out string
}

// DefaultOptions are the dissertation's: 16 servers, 16 clients, 100 000
// requests per run, the Poisson/Exp, fine- and medium-grain workloads at
// 50 % and 90 % load.
func DefaultOptions() Options {
	return Options{Sections: Sections, Workloads: []Workload{PoissonExp, FineGrain, MediumGrain}, Loads: []float64{0.5, 0.9},
		Servers: 16, Clients: 16, Requests: 100_000, Seed: 1, Out: "out"}
}

// Validate names the first bad option.
func (o Options) Validate() error {
	if o.Servers < 1 || o.Clients < 1 || o.Requests < 10 {
		return fmt.Errorf("lbsim: servers and clients must be >= 1 and requests >= 10, got %d, %d, %d", o.Servers, o.Clients, o.Requests)
	}
	for _, s := range o.Sections {
		if !slices.Contains(Sections, s) {
			return fmt.Errorf("lbsim: unknown section %q (want %v)", s, Sections)
		}
	}
	for _, l := range o.Loads {
		if l <= 0 || l >= 1 {
			return fmt.Errorf("lbsim: loads must be in (0, 1), got %v", l)
		}
	}
	return nil
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
				res[i], errs[i] = Simulate(cfgs[i])
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
		return nil, fmt.Errorf("lbsim: %w", err)
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
	arr := make([]time.Duration, 0, n)
	dep := make([]time.Duration, 0, n)
	var free time.Duration
	for r := range Trace(w, load, 1, seed) {
		if len(arr) == n {
			break
		}
		free = max(free, r.At) + r.Service
		arr, dep = append(arr, r.At), append(dep, free)
	}
	queue := func(t time.Duration) int {
		a, _ := slices.BinarySearch(arr, t+1)
		d, _ := slices.BinarySearch(dep, t+1)
		return a - d
	}
	rng := sim.Rand(seed, streamInaccuracy)
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
	tb := report.NewTable("workload", "load", "delay_over_service", "inaccuracy", "bound")
	for _, load := range o.Loads {
		ch := report.Chart{Title: fmt.Sprintf("Fig 3.1: load index inaccuracy, 1 server, %g%% busy", 100*load),
			XLabel: "delay / mean service time", YLabel: "mean |q(t+Δ) − q(t)|", LogX: true}
		for _, w := range o.Workloads {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("lbsim: %w", err)
			}
			delays := make([]time.Duration, len(mults))
			for i, m := range mults {
				delays[i] = time.Duration(m * float64(w.Service.Mean))
			}
			inacc := Inaccuracy(w, load, delays, 10*o.Requests, o.Seed)
			ch.Series = append(ch.Series, report.Series{Name: w.Name, X: mults, Y: inacc})
			for i, m := range mults {
				tb.Add(w.Name, ftoa(load), ftoa(m), ftoa(inacc[i]), ftoa(InaccuracyBound(load)))
			}
		}
		bound := make([]float64, len(mults))
		for i := range bound {
			bound[i] = InaccuracyBound(load)
		}
		ch.Series = append(ch.Series, report.Series{Name: "bound 2ρ/(1−ρ²)", X: mults, Y: bound})
		if err := ch.Save(filepath.Join(o.Out, fmt.Sprintf("fig3.1-load%02.0f.svg", 100*load))); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, "Fig 3.1 — load-index inaccuracy vs delay (1 server)")
	tb.WithHeader("workload", "load", "delay/svc", "inaccuracy", "bound").Print(stdout)
	return tb.Save(filepath.Join(o.Out, "fig3.1.csv"))
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
	tb := report.NewTable("workload", "load", "interval_ms", "mean_ms", "oracle_ms", "ratio")
	xs := make([]float64, len(intervals))
	for i, iv := range intervals {
		xs[i] = float64(iv) / float64(time.Millisecond)
	}
	k := 0
	for _, load := range o.Loads {
		ch := report.Chart{Title: fmt.Sprintf("Fig 3.2: broadcast, 16 servers, %g%% busy", 100*load),
			XLabel: "mean broadcast interval (ms)", YLabel: "mean response / ideal", LogX: true}
		for _, w := range o.Workloads {
			oracle := res[k]
			k++
			ys := make([]float64, len(intervals))
			for i := range intervals {
				ys[i], _ = res[k].Ratio(oracle)
				tb.Add(w.Name, ftoa(load), ftoa(xs[i]), ms(res[k].Mean), ms(oracle.Mean), ftoa(ys[i]))
				k++
			}
			ch.Series = append(ch.Series, report.Series{Name: w.Name, X: xs, Y: ys})
		}
		if err := ch.Save(filepath.Join(o.Out, fmt.Sprintf("fig3.2-load%02.0f.svg", 100*load))); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, "Fig 3.2 — broadcast interval (mean response normalised to the oracle)")
	tb.WithHeader("workload", "load", "interval ms", "mean ms", "oracle ms", "ratio").Print(stdout)
	return tb.Save(filepath.Join(o.Out, "fig3.2.csv"))
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
	tb := report.NewTable("workload", "load", "policy", "mean ms", "p99 ms", "mean/ideal", "polls/req")
	k := 0
	for _, load := range o.Loads {
		ch := report.Chart{Title: fmt.Sprintf("Fig 3.3: poll size, 16 servers, %g%% busy", 100*load),
			XLabel: "policy", YLabel: "mean response / ideal", XTicks: labels}
		for _, w := range o.Workloads {
			oracle := res[k+slices.IndexFunc(cons, func(c contender) bool { return c.name == "ideal" })]
			ys := make([]float64, len(cons))
			for i, c := range cons {
				r := res[k+i]
				ys[i], _ = r.Ratio(oracle)
				tb.Add(w.Name, ftoa(load), c.name, ms(r.Mean), ms(r.P99), ftoa(ys[i]), ftoa(r.PollsPerRequest))
			}
			k += len(cons)
			ch.Series = append(ch.Series, report.Series{Name: w.Name, X: xs, Y: ys})
		}
		if err := ch.Save(filepath.Join(o.Out, fmt.Sprintf("fig3.3-load%02.0f.svg", 100*load))); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, "Fig 3.3 — poll size (mean response normalised to the ideal/oracle)")
	tb.Print(stdout)
	return tb.Save(filepath.Join(o.Out, "fig3.3.csv"))
}

// goals runs issue 3's goals side by side at 90% load and prints every
// contender normalised to the oracle, then the goal checks.
func goals(ctx context.Context, o Options, stdout io.Writer) error {
	const load = 0.9
	def := balance.DefaultConfig()
	cons := []contender{
		{"oracle", policy(balance.NameOracle, nil)},
		{"default:" + def.Policy, def},
		// More information per call, the candidate for a default with
		// margin (not judged).
		{def.Policy + "-10", policy(def.Policy, func(c *balance.Config) { c.ProbeSize = 10 })},
		pollingD(3), pollingD(def.ProbeSize),
		{"async", policy(balance.NameAsync, nil)},
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
	slowCons := cons[:6]
	for _, c := range slowCons {
		cfg := o.config(PoissonExp, load, c.cfg)
		cfg.SlowServers, cfg.SlowFactor = 1, 10
		cfgs = append(cfgs, cfg)
	}
	res, err := runAll(ctx, cfgs)
	if err != nil {
		return err
	}
	tb := report.NewTable("workload", "policy", "mean ms", "p99 ms", "mean/oracle", "p99/oracle", "polls/req")
	byName := map[string]Result{}
	for i, w := range o.Workloads {
		oracle := res[i*len(cons)]
		for j, c := range cons {
			r := res[i*len(cons)+j]
			byName[w.Name+"/"+c.name] = r
			m, p := r.Ratio(oracle)
			tb.Add(w.Name, c.name, ms(r.Mean), ms(r.P99), ftoa(m), ftoa(p), ftoa(r.PollsPerRequest))
		}
	}
	slow := res[len(o.Workloads)*len(cons):]
	for j, c := range slowCons {
		r := slow[j]
		byName["exp-slow/"+c.name] = r
		m, p := r.Ratio(slow[0])
		tb.Add("exp, 1 replica 10× slower", c.name, ms(r.Mean), ms(r.P99), ftoa(m), ftoa(p), ftoa(r.PollsPerRequest))
	}
	fmt.Fprintf(stdout, "Goals — %g%% load, %d servers, %d clients, %d requests per run (ratios to the oracle of the same row group)\n",
		100*load, o.Servers, o.Clients, o.Requests)
	tb.Print(stdout)
	if err := tb.Save(filepath.Join(o.Out, "goals.csv")); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\ngoals (fixed before the run):")
	for _, c := range goalChecks(o.Workloads, o.Clients, cons[1].name, byName) {
		fmt.Fprintf(stdout, "  %s\n", c)
	}
	return nil
}

// goalChecks judges issue 3's goals on the goals section's results, keyed
// "workload/contender" (the slow-replica rows "exp-slow/contender"): the
// default (named dn) within 1.2× the oracle's mean and 1.35× its p99 on
// every workload, ≥ 2× better than localp2c on exp, its p99 with one
// replica 10× slower within 1.5× the healthy one, and ≥ 5× better than
// broadcast-1s on fine. The simulator is deterministic and never starved,
// so each is PASS or FAIL.
func goalChecks(workloads []Workload, clients int, dn string, byName map[string]Result) []*report.Check {
	var checks []*report.Check
	for _, w := range workloads {
		d, ok := byName[w.Name+"/"+dn]
		if !ok {
			continue
		}
		m, p := d.Ratio(byName[w.Name+"/oracle"])
		c := report.AtMost(fmt.Sprintf("%s: default mean ≤ 1.2× oracle, p99 ≤ 1.35×", w.Name), max(m/1.2, p/1.35), 1,
			fmt.Sprintf("mean %.3f×, p99 %.3f×", m, p))
		checks = append(checks, c)
	}
	if d, ok := byName["exp/"+dn]; ok {
		l := byName["exp/localp2c"]
		r := float64(l.Mean) / float64(d.Mean)
		checks = append(checks, report.AtLeast(fmt.Sprintf("exp: default mean ≥ 2× better than localp2c (%d clients)", clients), r, 2,
			fmt.Sprintf("localp2c/default %.2f×", r)))
		h, s := d, byName["exp-slow/"+dn]
		r = float64(s.P99) / float64(h.P99)
		checks = append(checks, report.AtMost("exp: one replica 10× slower, default p99 ≤ 1.5× healthy", r, 1.5,
			fmt.Sprintf("%.3f× (%s vs %s ms)", r, ms(s.P99), ms(h.P99))))
	}
	if d, ok := byName["fine/"+dn]; ok {
		r := float64(byName["fine/broadcast-1s"].Mean) / float64(d.Mean)
		checks = append(checks, report.AtLeast("fine: default mean ≥ 5× better than broadcast-1s", r, 5,
			fmt.Sprintf("broadcast/default %.2f×", r)))
	}
	return checks
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64)
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', 4, 64) }

// asyncSweep is issue 18's question for the simulator: does async
// (Prequal's probes off the call path) match the synchronous default once
// it probes more? Exp at 90% load, for 1, 4 and Options.Clients clients,
// async at its default probe rate and at 8 and 16 probes per call, beside
// the oracle and the default. The goals, fixed before the run: async's
// mean ≤ the default's at each client count (the bar for making it the
// default), and ≤ 1.10× the oracle's with Options.Clients clients.
func asyncSweep(ctx context.Context, o Options, stdout io.Writer) error {
	const load = 0.9
	def := balance.DefaultConfig()
	cons := []contender{
		{"oracle", policy(balance.NameOracle, nil)},
		{"default:" + def.Policy, def},
		{"async", policy(balance.NameAsync, nil)},
		{"async, 8 probes/call", policy(balance.NameAsync, func(c *balance.Config) { c.ProbeRate = 8 })},
		{"async, 16 probes/call, 1 use", policy(balance.NameAsync, func(c *balance.Config) { c.ProbeRate, c.ProbeReuse = 16, 1 })},
	}
	var counts []int
	for _, n := range []int{1, 4, o.Clients} {
		if !slices.Contains(counts, n) {
			counts = append(counts, n)
		}
	}
	var cfgs []Config
	for _, n := range counts {
		for _, c := range cons {
			cfg := o.config(PoissonExp, load, c.cfg)
			cfg.Clients = n
			cfgs = append(cfgs, cfg)
		}
	}
	res, err := runAll(ctx, cfgs)
	if err != nil {
		return err
	}
	tb := report.NewTable("clients", "policy", "mean ms", "p99 ms", "mean/oracle", "p99/oracle", "polls/req")
	var checks []*report.Check
	for i, n := range counts {
		row := res[i*len(cons) : (i+1)*len(cons)]
		for j, c := range cons {
			m, p := row[j].Ratio(row[0])
			tb.Add(strconv.Itoa(n), c.name, ms(row[j].Mean), ms(row[j].P99), ftoa(m), ftoa(p), ftoa(row[j].PollsPerRequest))
		}
		a, d := row[2], row[1]
		checks = append(checks, report.AtMost(fmt.Sprintf("%d clients: async mean ≤ the default's", n), float64(a.Mean)/float64(d.Mean), 1,
			fmt.Sprintf("%.3f× (%s vs %s ms)", float64(a.Mean)/float64(d.Mean), ms(a.Mean), ms(d.Mean))))
		if n == o.Clients {
			m, _ := a.Ratio(row[0])
			checks = append(checks, report.AtMost(fmt.Sprintf("%d clients: async mean ≤ 1.1× oracle", n), m, 1.1, fmt.Sprintf("%.3f×", m)))
		}
	}
	fmt.Fprintf(stdout, "Async probes — exp, %g%% load, %d servers, %d requests per run (ratios to the oracle with as many clients)\n",
		100*load, o.Servers, o.Requests)
	tb.Print(stdout)
	if err := tb.Save(filepath.Join(o.Out, "async.csv")); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\ngoals (fixed before the run):")
	for _, c := range checks {
		fmt.Fprintf(stdout, "  %s\n", c)
	}
	return nil
}

// pushSeeds is how many seeds the push section runs each contender on.
const pushSeeds = 3

// pushSweep asks whether servers pushing their load can replace polls on
// the call path: exp at 90% load, Options.Clients clients, on pushSeeds
// traces. Beside the oracle, the default, the default polling 10 replicas,
// the paper's poll-3 and async: join-idle-queue (an idle server tells one
// random client) and push on change (a server pushes its queue to every
// client, or to 4 random ones, whenever it changes). The goals, fixed
// before the run: on every seed, push on change to every client has a
// mean ≤ 1.10× and a p99 ≤ 1.2× the oracle's.
func pushSweep(ctx context.Context, o Options, stdout io.Writer) error {
	const load = 0.9
	def := balance.DefaultConfig()
	type pushed struct {
		contender
		idle, change int
	}
	push := policy(balance.NamePush, nil)
	cons := []pushed{
		{contender: contender{"oracle", policy(balance.NameOracle, nil)}},
		{contender: contender{"default:" + def.Policy, def}},
		{contender: contender{def.Policy + "-10 (waits for 10)", policy(def.Policy, func(c *balance.Config) { c.ProbeSize = 10 })}},
		{contender: pollingD(3)},
		{contender: contender{"async", policy(balance.NameAsync, nil)}},
		{contender: contender{"push, idle to 1 client (jiq)", policy(balance.NamePush, func(c *balance.Config) { c.IdleTokens = true })}, idle: 1},
		{contender: contender{"push, change to 4 clients", push}, change: 4},
		{contender: contender{"push, change to all", push}, change: o.Clients},
	}
	const judged = 7 // push, change to all
	var cfgs []Config
	for s := range uint64(pushSeeds) {
		for _, c := range cons {
			cfg := o.config(PoissonExp, load, c.cfg)
			cfg.Seed += s
			cfg.PushIdle, cfg.PushChange = c.idle, c.change
			cfgs = append(cfgs, cfg)
		}
	}
	res, err := runAll(ctx, cfgs)
	if err != nil {
		return err
	}
	tb := report.NewTable("seed", "policy", "mean ms", "p99 ms", "mean/oracle", "p99/oracle", "msgs/req")
	var checks []*report.Check
	for s := range pushSeeds {
		row := res[s*len(cons) : (s+1)*len(cons)]
		for j, c := range cons {
			m, p := row[j].Ratio(row[0])
			tb.Add(strconv.FormatUint(o.Seed+uint64(s), 10), c.name, ms(row[j].Mean), ms(row[j].P99), ftoa(m), ftoa(p), ftoa(row[j].PollsPerRequest))
		}
		m, p := row[judged].Ratio(row[0])
		checks = append(checks,
			report.AtMost(fmt.Sprintf("seed %d: %s mean ≤ 1.1× oracle", o.Seed+uint64(s), cons[judged].name), m, 1.1, fmt.Sprintf("%.3f×", m)),
			report.AtMost(fmt.Sprintf("seed %d: %s p99 ≤ 1.2× oracle", o.Seed+uint64(s), cons[judged].name), p, 1.2, fmt.Sprintf("%.3f×", p)))
	}
	fmt.Fprintf(stdout, "Pushed loads — exp, %g%% load, %d servers, %d clients, %d requests per run (ratios to the oracle of the same seed; msgs/req: polls and pushes sent per request)\n",
		100*load, o.Servers, o.Clients, o.Requests)
	tb.Print(stdout)
	if err := tb.Save(filepath.Join(o.Out, "push.csv")); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\ngoals (fixed before the run):")
	for _, c := range checks {
		fmt.Fprintf(stdout, "  %s\n", c)
	}
	return nil
}
