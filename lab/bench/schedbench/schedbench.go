// Package schedbench is `neptune bench sched`: dissertation Figs 4.8–4.10
// (LossPercent against demand for EDF, YID, Greedy and Adaptive, §4.5.2;
// section policies) and Figs 4.11–4.12 (class-aware balancing against
// server partitioning through a demand spike and a node failure,
// §4.5.3–4.5.4; section classes, classes.go) on real node processes
// confined to CPU quotas, where `neptune sim sched` and `neptune sim
// classes` (lab/sim/schedsim) run them on virtual time.
//
// In section policies, one node process hosts the work service with two
// workers (the dual-CPU nodes of §4.5) and the class scheduler
// configured, through its config file, with one policy; a fresh node runs
// each cell, as the product cannot change a service's policy while it
// runs. The bench process sends the simulator's workload open-loop
// (Poisson arrivals, seeded, the same arrivals for every policy of a
// round and demand level), each call in its class (neptune.WithClass)
// with the class's deadline as its own, and scores every request
// client-side with the class's yield function.
package schedbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/work"
	"github.com/neptune-cluster/neptune/internal/sched"
	"github.com/neptune-cluster/neptune/lab/cpuquota"
	"github.com/neptune-cluster/neptune/lab/localcluster"
	"github.com/neptune-cluster/neptune/lab/report"
	"github.com/neptune-cluster/neptune/lab/sim/schedsim"
)

// policies are the contenders, in the order of the tables.
var policies = []sched.Policy{sched.EDF, sched.YID, sched.Greedy, sched.Adaptive}

// quotaReserve is the CPU left beside the node for the load generator
// (this process) and the rest of the machine.
const quotaReserve = 0.5

// Sections of the benchmark: policies (Figs 4.8–4.10) and classes
// (Figs 4.11–4.12).
var Sections = []string{"policies", "classes"}

// Config are the knobs of `neptune bench sched`.
type Config struct {
	// Sections are the parts to run, of Sections.
	Sections []string
	// Out is the directory for the CSV and SVG files; empty writes none.
	Out string
	// CPU is the policies section's node process's quota in cores.
	CPU float64
	// Workers are the node's workers for the service.
	Workers int
	// Demands are the demand levels in percent of the node's capacity
	// (Workers ÷ the mean scaled service time, which is CPU ÷ the mean
	// spin).
	Demands []int
	// Cell is the measured arrival window of one policy at one level in
	// one round; Warmup more arrivals before it are sent but not scored
	// (in section classes, a warm-up phase no goal judges).
	Cell, Warmup time.Duration
	// Rounds are interleaved rounds, pooled (both sections).
	Rounds int
	// Workload is one of schedsim.WorkloadNames() (section policies).
	Workload string
	// Scale divides every time of the dissertation's workload (service
	// times and yield deadlines) in section policies.
	Scale float64
	// Seed seeds the arrivals (both sections).
	Seed uint64
	// Tolerance is the goal: Adaptive's LossPercent at most this many
	// points above the better of YID and Greedy at every level.
	Tolerance float64
	// SimDuration is the simulator's arrival window per point for the
	// figures printed beside the measured ones; 0 skips them (and the
	// classes section's figures beside).
	SimDuration time.Duration
	// Classes are the classes section's knobs.
	Classes ClassesConfig
}

// DefaultConfig is the defaults of `neptune bench sched`.
func DefaultConfig() Config {
	return Config{Sections: Sections, Out: "out/bench-sched", CPU: 0.5, Workers: 2, Demands: []int{50, 80, 100, 150, 200}, Cell: 20 * time.Second, Warmup: 2 * time.Second,
		Rounds: 3, Workload: "micro-hybrid", Scale: 10, Seed: 1, Tolerance: 2, SimDuration: 600 * time.Second,
		Classes: DefaultClassesConfig()}
}

// Validate names the first bad knob.
func (c Config) Validate() error {
	switch {
	case len(c.Sections) == 0 || slices.ContainsFunc(c.Sections, func(s string) bool { return !slices.Contains(Sections, s) }):
		return fmt.Errorf("schedbench: --sections %v, want some of %s", c.Sections, strings.Join(Sections, ", "))
	case !(c.CPU > 0) || c.CPU > 64:
		return fmt.Errorf("schedbench: --cpu %v, want a quota in cores > 0", c.CPU)
	case c.Workers < 1:
		return fmt.Errorf("schedbench: --workers %d, want >= 1", c.Workers)
	case len(c.Demands) == 0 || slices.ContainsFunc(c.Demands, func(d int) bool { return d <= 0 || d > 1000 }):
		return fmt.Errorf("schedbench: --demands %v, want percentages in 1..1000", c.Demands)
	case c.Cell < time.Second || c.Warmup < 0:
		return fmt.Errorf("schedbench: --cell %v and --warmup %v, want a cell of at least 1s and a warm-up >= 0", c.Cell, c.Warmup)
	case c.Rounds < 1:
		return fmt.Errorf("schedbench: --rounds %d, want >= 1", c.Rounds)
	case !slices.Contains(schedsim.WorkloadNames(), c.Workload):
		return fmt.Errorf("schedbench: --workload %q, want one of %s", c.Workload, strings.Join(schedsim.WorkloadNames(), ", "))
	case !(c.Scale >= 1):
		return fmt.Errorf("schedbench: --scale %v, want >= 1", c.Scale)
	case !(c.Tolerance >= 0):
		return fmt.Errorf("schedbench: --tolerance %v, want >= 0", c.Tolerance)
	case c.SimDuration < 0:
		return fmt.Errorf("schedbench: --sim-duration %v, want >= 0", c.SimDuration)
	}
	return c.Classes.validate()
}

// arrival is one request of a cell's trace.
type arrival struct {
	at    time.Duration // after the cell's start
	class int
	spin  time.Duration // CPU the request burns (work.spin)
}

// makeTrace draws the arrivals of one round at one demand level (the same
// for every policy): Poisson at rate per second for span, classes by the
// workload's mix, each request spinning its scaled service time times
// share (a worker's share of the quota).
func makeTrace(wl schedsim.Workload, rate float64, span time.Duration, share float64, seed uint64, round, demand int) []arrival {
	rng := rand.New(rand.NewPCG(seed, uint64(round)<<32|uint64(demand)))
	return drawTrace(rng, wl, share, []segment{{to: span, rate: rate, mix: wl.Mix}})
}

// segment is a stretch [from, to) of a trace with Poisson arrivals at rate
// per second and classes drawn by mix.
type segment struct {
	from, to time.Duration
	rate     float64
	mix      []float64
}

// drawTrace draws the arrivals of segs in turn, each request spinning its
// scaled service time times share. Poisson arrivals are memoryless, so
// starting each segment's draw afresh at its start is exact.
func drawTrace(rng *rand.Rand, wl schedsim.Workload, share float64, segs []segment) []arrival {
	var tr []arrival
	for _, sg := range segs {
		if !(sg.rate > 0) {
			continue
		}
		w := wl
		w.Mix = sg.mix
		next := func() time.Duration { return time.Duration(rng.ExpFloat64() / sg.rate * 1e9) }
		for at := sg.from + next(); at < sg.to; at += next() {
			k := w.Class(rng)
			tr = append(tr, arrival{at: at, class: k, spin: time.Duration(float64(w.Service(rng, k)) * share)})
		}
	}
	return tr
}

// nodeConfig is the node's config file: work on partition 0 with workers
// workers, the workload's classes and policy p, charged the handler
// thread's CPU (accounting: cpu), as the quota makes CPU the resource.
// Adaptive's drop window is scaled with the workload's times: the
// dissertation's 30 s over a workload 1/scale as long would span scale
// times as many requests, and follow a change as much more slowly.
func nodeConfig(wl schedsim.Workload, workers int, p sched.Policy, scale float64) string {
	return serviceConfig(wl.Classes, "0", workers, p, scale)
}

// serviceConfig is a node config hosting work on partitions (as the YAML
// key takes them, "0,3,5") with classes (their guarantees included) and
// the rest as nodeConfig says.
func serviceConfig(classes []sched.ClassConfig, partitions string, workers int, p sched.Policy, scale float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "services:\n  - name: work\n    partitions: %q\n    workers: %d\n    policy: %s\n    overload_window: %v\n    accounting: cpu\n    classes:\n",
		partitions, workers, p, overloadWindow(scale))
	for _, k := range classes {
		y := k.Yield
		switch {
		case y.PreDeadline == y.Deadline && y.Penalty == y.Full:
			fmt.Fprintf(&b, "      - {name: %s, yield: throughput, value: %g, deadline: %v", k.Name, y.Full, y.Deadline)
		case y.PreDeadline == 0 && y.Penalty == 0:
			fmt.Fprintf(&b, "      - {name: %s, yield: response_time, value: %g, deadline: %v", k.Name, y.Full, y.Deadline)
		default:
			fmt.Fprintf(&b, "      - {name: %s, yield: hybrid, value: %g, pre_deadline: %v, penalty: %g, deadline: %v", k.Name, y.Full, y.PreDeadline, y.Penalty, y.Deadline)
		}
		if k.Guarantee > 0 {
			fmt.Fprintf(&b, ", guarantee: %g", k.Guarantee)
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// overloadWindow is Adaptive's drop window (the dissertation's 30 s)
// divided by scale.
func overloadWindow(scale float64) time.Duration {
	return time.Duration(float64(30*time.Second) / scale)
}

// classResult is what one class got in a cell (measured arrivals only).
type classResult struct {
	Arrivals, Done    int
	Offered, Realized float64
	RespSum           time.Duration // over Done
}

// cellResult is one policy at one level in one round: what the verdicts
// read (cell) and what the tables and files add.
type cellResult struct {
	cell
	tally
}

// tally is what the tables and files read of a measured window beside
// what the verdicts read (measured).
type tally struct {
	Classes []classResult
	// Done were answered, Expired failed with the deadline (dropped by
	// the scheduler or late), Overloaded were refused at a full queue.
	Done, Expired, Overloaded int
	FirstErr                  string // of the Failed
	UsedCPU, Window           time.Duration
	SpinCPU                   time.Duration // what the answered requests asked to spin
}

// runner is one run.
type runner struct {
	cfg   Config
	wl    schedsim.Workload
	exe   string
	dir   string
	share float64 // a worker's share of the quota, cores
	rate  func(demand int) float64
	out   io.Writer
}

// Run is `neptune bench sched`.
func Run(ctx context.Context, cfg Config, stdout io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	exe, dir, cleanup, err := localcluster.Scratch("neptune-bench-sched-")
	if err != nil {
		return err
	}
	defer cleanup()
	began := time.Now()
	var checks []*report.Check
	for _, section := range cfg.Sections {
		run := runPolicies
		if section == "classes" {
			run = runClasses
		}
		cs, err := run(ctx, cfg, exe, dir, stdout)
		if err != nil {
			return fmt.Errorf("section %s: %w", section, err)
		}
		checks = append(checks, cs...)
	}
	fmt.Fprintf(stdout, "verdicts: %s\n", report.Tally(checks...))
	if cfg.Out != "" {
		fmt.Fprintf(stdout, "wrote the files to %s\n", cfg.Out)
	}
	fmt.Fprintf(stdout, "bench sched took %v\n", time.Since(began).Round(time.Second))
	return nil
}

// runPolicies is section policies (Figs 4.8–4.10); it prints and returns
// its verdicts.
func runPolicies(ctx context.Context, cfg Config, exe, dir string, stdout io.Writer) ([]*report.Check, error) {
	wl, err := schedsim.ScaledWorkload(cfg.Workload, cfg.Scale)
	if err != nil {
		return nil, err
	}
	if err := cpuquota.Fits([]float64{cfg.CPU}, quotaReserve); err != nil {
		return nil, fmt.Errorf("schedbench: %w", err)
	}
	b := &runner{cfg: cfg, wl: wl, exe: exe, dir: dir, share: cfg.CPU / float64(cfg.Workers), out: stdout}
	b.rate = func(d int) float64 { return float64(d) / 100 * float64(cfg.Workers) / wl.Mean.Seconds() }
	began := time.Now()
	b.header()

	var sim map[point]float64
	if cfg.SimDuration > 0 {
		if sim, err = b.simulate(ctx); err != nil {
			return nil, err
		}
	}
	var cells []cellResult
	for r := range cfg.Rounds {
		for di, d := range cfg.Demands {
			span := cfg.Warmup + cfg.Cell
			tr := makeTrace(wl, b.rate(d), span, b.share, cfg.Seed, r, d)
			for _, k := range rotate(contenders(r, d), r+di) {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				c, err := b.runCell(ctx, k, tr)
				if err != nil {
					return nil, fmt.Errorf("round %d, %d%% demand, %s: %w", r+1, d, k.label(), err)
				}
				cells = append(cells, c)
				b.progress(c, sim)
			}
		}
		fmt.Fprintf(stdout, "round %d of %d done (%v so far)\n", r+1, cfg.Rounds, time.Since(began).Round(time.Second))
	}
	b.tables(cells, sim)
	base := make([]cell, len(cells))
	for i, c := range cells {
		base[i] = c.cell
	}
	checks := verdicts(cfg.Tolerance, cfg.Demands, base)
	fmt.Fprintln(stdout)
	for _, c := range checks {
		fmt.Fprintln(stdout, c)
	}
	if cfg.Out != "" {
		if err := b.save(cells, sim); err != nil {
			return nil, err
		}
	}
	return checks, nil
}

// header states the setup, the scaling and what demand means.
func (b *runner) header() {
	cfg, wl := b.cfg, b.wl
	fmt.Fprintf(b.out, "bench sched: %s on one node process confined to %.2f cores, work with %d workers, the class scheduler per policy (a fresh node per cell); %v measured per cell after %v of warm-up, %d interleaved rounds, seed %d\n",
		wl.Name, cfg.CPU, cfg.Workers, cfg.Cell, cfg.Warmup, cfg.Rounds, cfg.Seed)
	var means, spins []string
	for k, c := range wl.Classes {
		means = append(means, fmt.Sprintf("%s %v", c.Name, wl.Means[k].Round(time.Microsecond)))
		spins = append(spins, fmt.Sprint(time.Duration(float64(wl.Means[k])*b.share).Round(time.Microsecond)))
	}
	y := wl.Classes[0].Yield
	fmt.Fprintf(b.out, "times scaled 1/%g from the dissertation's: service means %s (gold's yield: deadline D = %v, D′ = %v; Adaptive's drop window %v); a request spins its service time × %.3f (a worker's share of the quota) of CPU: %s\n",
		cfg.Scale, strings.Join(means, ", "), y.Deadline, y.PreDeadline, overloadWindow(cfg.Scale), b.share, strings.Join(spins, ", "))
	capacity := b.rate(100)
	fmt.Fprintf(b.out, "demand 100%% = %.1f requests/s, derived (not measured): %d workers ÷ mean service %v = %.2f cores ÷ mean spin %v; the node's own per-call CPU comes on top\n",
		capacity, cfg.Workers, wl.Mean.Round(time.Microsecond), cfg.CPU, time.Duration(float64(wl.Mean)*b.share).Round(time.Microsecond))
	fmt.Fprintf(b.out, "each call carries its class (neptune.WithClass) and its class's deadline D as its own; its yield is scored client-side from its response time (0 if dropped or late); LossPercent = 100 × (1 − realized ÷ offered)\n")
}

// contenders are the cells of a round at one demand level: every policy,
// and the control.
func contenders(round, demand int) []cell {
	var cs []cell
	for _, p := range policies {
		cs = append(cs, cell{Round: round, Demand: demand, Policy: p})
	}
	return append(cs, cell{Round: round, Demand: demand, Policy: controlPolicy, Control: true})
}

// rotate returns ps rotated left by n.
func rotate[T any](ps []T, n int) []T {
	n %= len(ps)
	return append(slices.Clone(ps[n:]), ps[:n]...)
}

// point is one demand level and policy.
type point struct {
	demand int
	policy sched.Policy
}

// simulate is the simulator's LossPercent for every point, at the same
// scale, on the same number of workers.
func (b *runner) simulate(ctx context.Context) (map[point]float64, error) {
	t0 := time.Now()
	out := map[point]float64{}
	for _, d := range b.cfg.Demands {
		for _, p := range policies {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			l, err := schedsim.SimulateLoss(b.wl, p, b.cfg.Workers, float64(d)/100, b.cfg.SimDuration, b.cfg.Seed)
			if err != nil {
				return nil, err
			}
			out[point{d, p}] = l
		}
	}
	fmt.Fprintf(b.out, "simulator (schedsim, the same scaled workload on %d dedicated workers, %v of arrivals per point, seed %d) computed in %v\n",
		b.cfg.Workers, b.cfg.SimDuration, b.cfg.Seed, time.Since(t0).Round(time.Millisecond))
	return out, nil
}

// runCell starts a node with policy p, sends tr and scores it.
func (b *runner) runCell(ctx context.Context, k cell, tr []arrival) (cellResult, error) {
	res := cellResult{cell: k}
	p := k.Policy
	dir := filepath.Join(b.dir, fmt.Sprintf("r%d-d%d-%s", k.Round+1, k.Demand, k.label()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	conf := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(conf, []byte(nodeConfig(b.wl, b.cfg.Workers, p, b.cfg.Scale)), 0o644); err != nil {
		return res, err
	}
	cl := localcluster.New(b.exe, dir)
	defer cl.Close()
	n, err := cl.Start(ctx, localcluster.Spec{ID: "sched", CPU: b.cfg.CPU, Args: []string{"--config", conf, "--log-level", "warn"}})
	if err != nil {
		return res, err
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: neptune.Security{Insecure: true}, Join: cl.Seeds(), Retry: neptune.RetryPolicy{Budget: -1}})
	if err != nil {
		return res, err
	}
	defer c.Close()
	if err := localcluster.WaitMembers(ctx, c, 1, 30*time.Second); err != nil {
		return res, err
	}
	if err := localcluster.Wait(ctx, 15*time.Second, func(ctx context.Context) error {
		_, err := c.Call(ctx, "work", 0, "spin", work.Encode(0), neptune.WithTimeout(time.Second))
		return err
	}); err != nil {
		return res, fmt.Errorf("work not served: %w", err)
	}
	m := &cpuquota.Meter{}
	m.Watch("node", n.PID(), b.cfg.CPU)
	if err := b.drive(ctx, c, tr, m, &res); err != nil {
		return res, err
	}
	return res, nil
}

// outcome is one call's result.
type outcome struct {
	sent     bool
	err      error
	resp     time.Duration
	lateness time.Duration
}

// drive sends tr open-loop through c, meters the node over the measured
// window and scores the measured requests into res.
func (b *runner) drive(ctx context.Context, c *neptune.Client, tr []arrival, m *cpuquota.Meter, res *cellResult) error {
	from, to := b.cfg.Warmup, b.cfg.Warmup+b.cfg.Cell
	start := time.Now()
	var (
		meterErr error
		judge    cpuquota.Judgment
		used     []cpuquota.Usage
		window   time.Duration
		metered  = make(chan struct{})
	)
	go func() {
		defer close(metered)
		if !sleepUntil(ctx, start.Add(from)) {
			meterErr = ctx.Err()
			return
		}
		if meterErr = m.Start(); meterErr != nil {
			return
		}
		t0 := time.Now()
		if !sleepUntil(ctx, start.Add(to)) {
			meterErr = ctx.Err()
			return
		}
		judge, used, meterErr = m.Stop()
		window = time.Since(t0)
	}()
	outs, err := send(ctx, c, b.wl.Classes, tr, start, func(arrival) int { return 0 })
	<-metered
	if err != nil {
		return err
	}
	if meterErr != nil {
		return meterErr
	}
	res.measured, res.tally = score(b.wl.Classes, tr, outs, from, to)
	res.Window = window
	res.UsedCPU = used[0].Used
	res.Util = used[0].Used.Seconds() / (window.Seconds() * b.cfg.CPU)
	res.Peak = res.Util
	res.Over = len(judge.Over) > 0
	res.Starved = judge.Starved
	res.Reason = judge.Reason
	return nil
}

// send sends tr open-loop through c from start, each request at its time
// to the partition of work that route names, in its class with the
// class's deadline as its own, and returns once every call has ended,
// with each one's outcome.
func send(ctx context.Context, c *neptune.Client, classes []sched.ClassConfig, tr []arrival, start time.Time, route func(arrival) int) ([]outcome, error) {
	outs := make([]outcome, len(tr))
	var wg sync.WaitGroup
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i, a := range tr {
		due := start.Add(a.at)
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				wg.Wait()
				return nil, ctx.Err()
			}
		}
		sent := time.Now()
		k, p := classes[a.class], route(a)
		wg.Go(func() {
			cctx, cancel := context.WithDeadline(ctx, sent.Add(k.Yield.Deadline))
			defer cancel()
			_, err := c.Call(cctx, "work", p, "spin", work.Encode(a.spin), neptune.WithClass(k.Name))
			outs[i] = outcome{sent: true, err: err, resp: time.Since(sent), lateness: max(sent.Sub(due), 0)}
		})
	}
	wg.Wait()
	return outs, nil
}

// score scores the requests of tr that arrived in [from, to) from their
// outcomes: each with its class's yield function of its response time, 0
// if it failed.
func score(classes []sched.ClassConfig, tr []arrival, outs []outcome, from, to time.Duration) (measured, tally) {
	var m measured
	t := tally{Classes: make([]classResult, len(classes))}
	var lateSum time.Duration
	for i, a := range tr {
		if a.at < from || a.at >= to {
			continue
		}
		o := outs[i]
		y := classes[a.class].Yield
		k := &t.Classes[a.class]
		k.Arrivals++
		k.Offered += y.Full
		m.Arrivals++
		lateSum += o.lateness
		switch {
		case o.err == nil:
			t.Done++
			k.Done++
			k.RespSum += o.resp
			k.Realized += y.At(o.resp)
			t.SpinCPU += a.spin
		case errors.Is(o.err, neptune.ErrDeadline) || errors.Is(o.err, context.DeadlineExceeded):
			t.Expired++
		case errors.Is(o.err, neptune.ErrOverloaded):
			t.Overloaded++
		default:
			m.Failed++
			if t.FirstErr == "" {
				t.FirstErr = o.err.Error()
			}
		}
	}
	for _, k := range t.Classes {
		m.Offered += k.Offered
		m.Realized += k.Realized
	}
	if m.Arrivals > 0 {
		m.Lag = lateSum / time.Duration(m.Arrivals)
	}
	return m, t
}

// sleepUntil sleeps until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// progress prints one cell's line.
func (b *runner) progress(c cellResult, sim map[point]float64) {
	simS := ""
	if l, ok := sim[point{c.Demand, c.Policy}]; ok {
		simS = fmt.Sprintf(" (sim %.2f)", l)
	}
	perCall := "-"
	if c.Done > 0 {
		perCall = fmt.Sprint((c.UsedCPU / time.Duration(c.Done)).Round(10 * time.Microsecond))
	}
	spin := "-"
	if c.Done > 0 {
		spin = fmt.Sprint((c.SpinCPU / time.Duration(c.Done)).Round(10 * time.Microsecond))
	}
	mark := ""
	switch {
	case c.Over:
		mark = " QUOTA EXCEEDED: " + c.Reason
	case c.Starved:
		mark = " (machine starved: " + c.Reason + ")"
	case c.Demand >= 100 && c.Util < minUtil:
		mark = " (not node-bound)"
	}
	fails := ""
	if c.Failed > 0 || c.Overloaded > 0 {
		fails = fmt.Sprintf(", %d refused (queue full), %d failed (first: %s)", c.Overloaded, c.Failed, c.FirstErr)
	}
	fmt.Fprintf(b.out, "  round %d, %3d%% demand, %-8s LossPercent %6.2f%s: %d requests, %d answered, %d dropped or late%s; node %3.0f%% of its quota, %s CPU per answered call (spin %s); send lateness %v%s\n",
		c.Round+1, c.Demand, c.label(), c.loss(), simS, c.Arrivals, c.Done, c.Expired, fails, 100*c.Util, perCall, spin, c.Lag.Round(10*time.Microsecond), mark)
}

// pooled sums the cells of one point over rounds.
func pooled(cells []cellResult, d int, p sched.Policy) (off, real float64, n int) {
	for _, c := range cells {
		if c.Demand == d && c.Policy == p && !c.Control {
			off += c.Offered
			real += c.Realized
			n++
		}
	}
	return off, real, n
}

// tables prints the LossPercent table with the simulator's figures beside
// it, and the per-class breakdown at the highest level (Fig 4.10).
func (b *runner) tables(cells []cellResult, sim map[point]float64) {
	fmt.Fprintf(b.out, "\n%s on a node process at %.2f cores: LossPercent, pooled over %d rounds", b.wl.Name, b.cfg.CPU, b.cfg.Rounds)
	if sim != nil {
		fmt.Fprint(b.out, " [simulator beside]")
	}
	fmt.Fprintf(b.out, "\n%-7s", "demand")
	for _, p := range policies {
		fmt.Fprintf(b.out, " %16s", p)
	}
	fmt.Fprintf(b.out, " %18s\n", "A − min(YID, Gr)")
	for _, d := range b.cfg.Demands {
		fmt.Fprintf(b.out, "%6d%%", d)
		var loss [4]float64
		for i, p := range policies {
			off, real, _ := pooled(cells, d, p)
			loss[i] = sched.LossPercent(off, real)
			fmt.Fprintf(b.out, " %16s", withSim(loss[i], sim, point{d, p}))
		}
		gap := loss[3] - min(loss[1], loss[2])
		s := fmt.Sprintf("%+.2f", gap)
		if sim != nil {
			sg := sim[point{d, sched.Adaptive}] - min(sim[point{d, sched.YID}], sim[point{d, sched.Greedy}])
			s += fmt.Sprintf(" [%+.2f]", sg)
		}
		fmt.Fprintf(b.out, " %18s\n", s)
	}
	var noises []string
	for _, d := range b.cfg.Demands {
		var at []cell
		for _, c := range cells {
			if c.Demand == d {
				at = append(at, c.cell)
			}
		}
		noises = append(noises, fmt.Sprintf("%d%% %.2f", d, noise(at)))
	}
	fmt.Fprintf(b.out, "control: %s twice on the same arrivals, pooled LossPercents apart by %s points (what this run can resolve)\n", controlPolicy, strings.Join(noises, ", "))
	// What the node spends per call beyond the spin (gRPC, the runtime)
	// raises the demand above the nominal; measured where nearly every
	// call is answered and none is cut short.
	var used, spin time.Duration
	var done int
	for _, c := range cells {
		if c.Demand < 100 {
			used, spin, done = used+c.UsedCPU, spin+c.SpinCPU, done+c.Done
		}
	}
	if done > 0 && spin > 0 {
		fmt.Fprintf(b.out, "node CPU per answered call below 100%% demand: %v against %v of spin (%+.0f%%): the node's demand is about that much above the nominal\n",
			(used / time.Duration(done)).Round(10*time.Microsecond), (spin / time.Duration(done)).Round(10*time.Microsecond), 100*(float64(used)/float64(spin)-1))
	}
	top := slices.Max(b.cfg.Demands)
	fmt.Fprintf(b.out, "\nper class at %d%% demand, pooled over rounds (Fig 4.10)\n%-9s %-7s %9s %10s %8s\n", top, "policy", "class", "done/s", "mean resp", "loss%")
	for _, p := range policies {
		ks := make([]classResult, len(b.wl.Classes))
		var win time.Duration
		for _, c := range cells {
			if c.Demand != top || c.Policy != p || c.Control {
				continue
			}
			win += b.cfg.Cell
			for k, r := range c.Classes {
				ks[k].Arrivals += r.Arrivals
				ks[k].Done += r.Done
				ks[k].Offered += r.Offered
				ks[k].Realized += r.Realized
				ks[k].RespSum += r.RespSum
			}
		}
		for k, r := range ks {
			mean := time.Duration(0)
			if r.Done > 0 {
				mean = r.RespSum / time.Duration(r.Done)
			}
			fmt.Fprintf(b.out, "%-9s %-7s %9.2f %10v %8.2f\n", p, b.wl.Classes[k].Name, float64(r.Done)/win.Seconds(), mean.Round(100*time.Microsecond), sched.LossPercent(r.Offered, r.Realized))
		}
	}
}

// withSim formats a measured LossPercent with the simulator's beside it.
func withSim(l float64, sim map[point]float64, pt point) string {
	if s, ok := sim[pt]; ok {
		return fmt.Sprintf("%.2f [%.2f]", l, s)
	}
	return fmt.Sprintf("%.2f", l)
}

// save writes the per-cell and per-point CSV files and the chart.
func (b *runner) save(cells []cellResult, sim map[point]float64) error {
	prefix := filepath.Join(b.cfg.Out, "bench-sched-"+b.wl.Name)
	t := report.NewTable("round", "demand_percent", "policy", "arrivals", "answered", "expired", "refused", "failed", "offered_yield", "realized_yield",
		"loss_percent", "node_quota_use", "starved", "quota_exceeded", "send_lateness_us")
	cls := report.NewTable("round", "demand_percent", "policy", "class", "arrivals", "answered", "offered_yield", "realized_yield", "mean_response_us")
	for _, c := range cells {
		t.Addf("%d,%d,%s,%d,%d,%d,%d,%d,%.1f,%.3f,%.3f,%.3f,%t,%t,%d", c.Round+1, c.Demand, c.label(), c.Arrivals, c.Done, c.Expired, c.Overloaded, c.Failed,
			c.Offered, c.Realized, c.loss(), c.Util, c.Starved, c.Over, c.Lag.Microseconds())
		for k, r := range c.Classes {
			mean := time.Duration(0)
			if r.Done > 0 {
				mean = r.RespSum / time.Duration(r.Done)
			}
			cls.Addf("%d,%d,%s,%s,%d,%d,%.1f,%.3f,%d", c.Round+1, c.Demand, c.label(), b.wl.Classes[k].Name, r.Arrivals, r.Done, r.Offered, r.Realized, mean.Microseconds())
		}
	}
	pts := report.NewTable("demand_percent", "policy", "loss_percent", "sim_loss_percent")
	ch := report.Chart{Title: fmt.Sprintf("LossPercent vs demand: %s, node process at %.2f cores; (sim) the simulator", b.wl.Name, b.cfg.CPU),
		XLabel: "demand (% of capacity)", YLabel: "LossPercent"}
	for _, p := range policies {
		s := report.Series{Name: p.String()}
		ss := report.Series{Name: p.String() + " (sim)"}
		for _, d := range b.cfg.Demands {
			off, real, _ := pooled(cells, d, p)
			l := sched.LossPercent(off, real)
			s.Add(float64(d), l)
			simL := math.NaN()
			if v, ok := sim[point{d, p}]; ok {
				simL = v
				ss.Add(float64(d), v)
			}
			pts.Addf("%d,%s,%.3f,%.3f", d, p, l, simL)
		}
		ch.Series = append(ch.Series, s)
		if len(ss.X) > 0 {
			ch.Series = append(ch.Series, ss)
		}
	}
	for _, f := range []struct {
		t    *report.Table
		name string
	}{{t, "-cells.csv"}, {cls, "-classes.csv"}, {pts, "-loss.csv"}} {
		if err := f.t.Save(prefix + f.name); err != nil {
			return err
		}
	}
	return ch.Save(prefix + ".svg")
}
