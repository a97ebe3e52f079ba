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
	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/sched"
	"github.com/neptune-cluster/neptune/lab/cpuquota"
	"github.com/neptune-cluster/neptune/lab/localcluster"
	"github.com/neptune-cluster/neptune/lab/report"
	"github.com/neptune-cluster/neptune/lab/sim/schedsim"
)

// Section classes: Figs 4.11–4.12 on node processes. Nodes node
// processes, each confined to CPU cores, host work with the Differentiated
// Search workload's classes (hybrid yields, 20% guarantees, Adaptive), and
// this process sends Fig 4.12's timeline open-loop: steady demand,
// silver's demand tripled, steady, one node SIGKILLed, the node back. Two
// schemes run the same arrivals in each round, on fresh nodes:
// class-aware (every class may use every node; the client's balancing
// policy picks, polled with the call's class) and partitioning (each
// class sent only to its own nodes, divided by the dissertation's rule
// every interval: partitionSchedule).

// classesWorkload is Fig 4.12's: Differentiated Search, hybrid yields.
const classesWorkload = "search-hybrid"

// ClassesConfig are the knobs of section classes.
type ClassesConfig struct {
	// Nodes are the node processes, each confined to CPU cores and
	// hosting work with Config.Workers workers.
	Nodes int
	CPU   float64
	// Demand is the steady demand in percent of the cluster's derived
	// capacity (Nodes × workers ÷ the mean scaled service time).
	Demand int
	// Scale divides every time of the workload (service times, yield
	// deadlines) and of the timeline (its phases, the partitioning
	// interval, Adaptive's drop window).
	Scale float64
	// Balance is the client's balancing policy (neptune.BalancingPolicies;
	// "" is the product's default).
	Balance string
}

// DefaultClassesConfig is the defaults of section classes: 8 nodes of
// 0.12 cores leave 1 of the 2 cores to the load generator and the rest,
// and the dissertation's polling policy.
func DefaultClassesConfig() ClassesConfig {
	return ClassesConfig{Nodes: 8, CPU: 0.12, Demand: 80, Scale: 5, Balance: balance.NamePolling}
}

func (c ClassesConfig) validate() error {
	switch {
	case c.Nodes < 2 || c.Nodes > 64:
		return fmt.Errorf("schedbench: --classes-nodes %d, want 2..64", c.Nodes)
	case !(c.CPU > 0) || c.CPU > 64:
		return fmt.Errorf("schedbench: --classes-cpu %v, want a quota in cores > 0", c.CPU)
	case c.Demand <= 0 || c.Demand > 1000:
		return fmt.Errorf("schedbench: --classes-demand %d, want a percentage in 1..1000", c.Demand)
	case !(c.Scale >= 1):
		return fmt.Errorf("schedbench: --classes-scale %v, want >= 1", c.Scale)
	}
	if err := balance.CheckName(c.Balance); err != nil {
		return fmt.Errorf("schedbench: --classes-balance: %w", err)
	}
	return nil
}

// scheme is a contender of section classes.
type scheme int

const (
	classAware scheme = iota
	partitioning
)

var schemes = []scheme{classAware, partitioning}

func (s scheme) String() string { return [...]string{"class-aware", "partitioning"}[s] }

// phaseResult is one scheme in one phase of one round: what the verdicts
// read and what the tables and files add.
type phaseResult struct {
	phaseCell
	tally
}

// classesRunner is one run of section classes.
type classesRunner struct {
	cfg    Config
	cc     ClassesConfig
	wl     schedsim.Workload // scaled, with the guarantees
	plan   []planPhase
	routes map[scheme]routing
	share  float64 // a worker's share of a node's quota, cores
	exe    string
	dir    string
	out    io.Writer
}

// runClasses is section classes (Figs 4.11–4.12); it prints and returns
// its verdicts.
func runClasses(ctx context.Context, cfg Config, exe, dir string, stdout io.Writer) ([]*report.Check, error) {
	cc := cfg.Classes
	wl, err := schedsim.ScaledWorkload(classesWorkload, cc.Scale)
	if err != nil {
		return nil, err
	}
	wl.Classes = slices.Clone(wl.Classes)
	for k := range wl.Classes {
		wl.Classes[k].Guarantee = guarantee
	}
	if err := cpuquota.Fits(slices.Repeat([]float64{cc.CPU}, cc.Nodes), quotaReserve); err != nil {
		return nil, fmt.Errorf("schedbench: %w", err)
	}
	b := &classesRunner{cfg: cfg, cc: cc, wl: wl, exe: exe, dir: dir, out: stdout, share: cc.CPU / float64(cfg.Workers),
		plan: plan(wl, cc.Nodes, cfg.Workers, float64(cc.Demand)/100, cc.Scale, cfg.Warmup)}
	cost := make([]float64, len(wl.Means))
	for k, m := range wl.Means {
		cost[k] = m.Seconds()
	}
	interval := time.Duration(float64(partitionInterval) / cc.Scale)
	schedule := partitionSchedule(b.plan, wl.Classes, cost, cc.Nodes, cfg.Workers, interval)
	b.routes = map[scheme]routing{classAware: newRouting(nil, len(wl.Classes)), partitioning: newRouting(schedule, len(wl.Classes))}
	began := time.Now()
	b.header(interval, schedule)

	var sim map[phaseKey]float64
	if cfg.SimDuration > 0 {
		if sim, err = b.simulate(); err != nil {
			return nil, err
		}
	}
	var results []phaseResult
	for r := range cfg.Rounds {
		tr := drawTrace(rand.New(rand.NewPCG(cfg.Seed, 1<<63|uint64(r))), wl, b.share, segments(b.plan))
		for _, sc := range rotate(schemes, r) {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			rs, err := b.runCell(ctx, r, sc, tr)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", r+1, sc, err)
			}
			results = append(results, rs...)
			b.progress(r, sc, rs)
		}
		fmt.Fprintf(stdout, "round %d of %d done (%v so far)\n", r+1, cfg.Rounds, time.Since(began).Round(time.Second))
	}
	b.tables(results, sim)
	cells := make([]phaseCell, len(results))
	for i, x := range results {
		cells[i] = x.phaseCell
	}
	checks := classesVerdicts(b.plan, cells)
	fmt.Fprintln(stdout)
	for _, c := range checks {
		fmt.Fprintln(stdout, c)
	}
	if cfg.Out != "" {
		if err := b.save(results, sim); err != nil {
			return nil, err
		}
	}
	return checks, nil
}

// header states the setup, the timeline and partitioning's schedule.
func (b *classesRunner) header(interval time.Duration, schedule []division) {
	cfg, cc, wl := b.cfg, b.cc, b.wl
	policy := cc.Balance
	if policy == "" {
		policy = "the default (" + balance.NamePrequal + ")"
	}
	fmt.Fprintf(b.out, "\nbench sched, classes (Figs 4.11–4.12): %s on %d node processes confined to %.2f cores each, work with %d workers, guarantees %.0f%%, Adaptive; the client's balancing policy %s; a fresh cluster per scheme per round, %d interleaved rounds, seed %d\n",
		wl.Name, cc.Nodes, cc.CPU, cfg.Workers, 100*guarantee, policy, cfg.Rounds, cfg.Seed)
	y := wl.Classes[0].Yield
	fmt.Fprintf(b.out, "times scaled 1/%g: service mean %v (spin %v of CPU), D = %v, D′ = %v, partitioning interval %v; demand 100%% = %.1f requests/s (derived: %d × %d workers ÷ %v); the nodes' own per-call CPU comes on top\n",
		cc.Scale, wl.Mean.Round(time.Microsecond), time.Duration(float64(wl.Mean)*b.share).Round(time.Microsecond), y.Deadline, y.PreDeadline, interval,
		float64(cc.Nodes*cfg.Workers)/wl.Mean.Seconds(), cc.Nodes, cfg.Workers, wl.Mean.Round(time.Microsecond))
	var phases []string
	for _, p := range b.plan {
		phases = append(phases, fmt.Sprintf("%s %v–%v at %.0f%%", p.Name, p.From, p.To, b.demand(p)))
	}
	fmt.Fprintf(b.out, "timeline: %s (%% of the live nodes' capacity; silver ×%d in the spike, node n%d SIGKILLed in the failure and restarted after; the spike and the failure are judged)\n",
		strings.Join(phases, ", "), spikeFactor, victim)
	fmt.Fprintf(b.out, "partitioning: whole nodes per class (%s) by the dissertation's rule on the planned demand of the last interval, among the nodes up throughout it: %s\n",
		strings.Join(classNames(wl.Classes), "/"), describe(schedule, wl.Classes))
}

// demand is a phase's demand in percent of its live nodes' capacity.
func (b *classesRunner) demand(p planPhase) float64 {
	total := 0.0
	for _, r := range p.Rates {
		total += r
	}
	return 100 * total * b.wl.Mean.Seconds() / float64((b.cc.Nodes-len(p.Down))*b.cfg.Workers)
}

func classNames(cs []sched.ClassConfig) []string {
	names := make([]string, len(cs))
	for k, c := range cs {
		names[k] = c.Name
	}
	return names
}

// phaseKey is one scheme in one phase.
type phaseKey struct {
	scheme scheme
	phase  int
}

// simulate is the simulator's LossPercent for every phase of both schemes
// on the same nodes, its partitioning its own (measured demand, shared
// nodes for the fractions; schedsim.SimulatePhases).
func (b *classesRunner) simulate() (map[phaseKey]float64, error) {
	t0 := time.Now()
	phases := make([]schedsim.ClusterPhase, len(b.plan))
	for i, p := range b.plan {
		phases[i] = p.ClusterPhase
	}
	out := map[phaseKey]float64{}
	for _, sc := range schemes {
		off, real, err := schedsim.SimulatePhases(b.wl, sc == partitioning, b.cc.Nodes, b.cfg.Workers, phases, b.plan[len(b.plan)-1].To, b.cfg.Seed)
		if err != nil {
			return nil, err
		}
		for i := range b.plan {
			out[phaseKey{sc, i}] = sched.LossPercent(off[i], real[i])
		}
	}
	fmt.Fprintf(b.out, "simulator (schedsim: the same timeline on %d dedicated-worker nodes; its partitioning re-divides by measured demand and shares nodes for fractions) computed in %v\n",
		b.cc.Nodes, time.Since(t0).Round(time.Millisecond))
	return out, nil
}

// runCell starts the cluster for scheme sc, sends tr through the timeline
// (killing and restarting the victim) and scores each phase.
func (b *classesRunner) runCell(ctx context.Context, round int, sc scheme, tr []arrival) ([]phaseResult, error) {
	dir := filepath.Join(b.dir, fmt.Sprintf("classes-r%d-%s", round+1, sc))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	rt := b.routes[sc]
	cl := localcluster.New(b.exe, dir)
	defer cl.Close()
	nodes := make([]*localcluster.Node, b.cc.Nodes)
	for i := range nodes {
		conf := filepath.Join(dir, fmt.Sprintf("n%d.yaml", i))
		if err := os.WriteFile(conf, []byte(serviceConfig(b.wl.Classes, rt.hosted(i), b.cfg.Workers, sched.Adaptive, b.cc.Scale)), 0o644); err != nil {
			return nil, err
		}
		n, err := cl.Start(ctx, localcluster.Spec{ID: fmt.Sprintf("n%d", i), CPU: b.cc.CPU, Args: []string{"--config", conf, "--log-level", "warn"}})
		if err != nil {
			return nil, err
		}
		nodes[i] = n
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Security: neptune.Security{Insecure: true}, Join: cl.Seeds(), Retry: neptune.RetryPolicy{Budget: -1},
		Balance: neptune.Balancing{Policy: b.cc.Balance}})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := localcluster.WaitMembers(ctx, c, b.cc.Nodes, 30*time.Second); err != nil {
		return nil, err
	}
	for _, p := range rt.partitions() {
		if err := localcluster.Wait(ctx, 15*time.Second, func(ctx context.Context) error {
			_, err := c.Call(ctx, "work", p, "spin", work.Encode(0), neptune.WithTimeout(time.Second))
			return err
		}); err != nil {
			return nil, fmt.Errorf("work partition %d not served: %w", p, err)
		}
	}
	// A timeline that fails (a kill, a restart, the meter) stops the
	// sending too.
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	start := time.Now()
	var (
		windows []phaseWindow
		lineErr error
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		if windows, lineErr = b.timeline(ctx, cl, nodes, start); lineErr != nil {
			stop()
		}
	}()
	outs, err := send(sctx, c, b.wl.Classes, tr, start, func(a arrival) int { return rt.partition(a.at, a.class) })
	<-done
	if lineErr != nil {
		return nil, lineErr
	}
	if err != nil {
		return nil, err
	}
	res := make([]phaseResult, len(b.plan))
	for i, p := range b.plan {
		m, t := score(b.wl.Classes, tr, outs, p.From, p.To)
		w := windows[i]
		m.Util, m.Peak, m.Over, m.Starved, m.Reason = w.util, w.peak, w.over, w.starved, w.reason
		t.UsedCPU, t.Window = w.used, w.window
		res[i] = phaseResult{phaseCell: phaseCell{Round: round, Scheme: sc, Phase: i, measured: m}, tally: t}
	}
	return res, nil
}

// phaseWindow is cpuquota's measure of one phase over the nodes up
// throughout it.
type phaseWindow struct {
	util, peak    float64
	over, starved bool
	reason        string
	used, window  time.Duration
}

// timeline walks the plan from start: at each phase's start it closes the
// last phase's meter, kills the nodes the phase has down and restarts
// those it has back (the restart runs beside, so the meter opens on
// time), and meters the nodes up throughout the phase.
func (b *classesRunner) timeline(ctx context.Context, cl *localcluster.Cluster, nodes []*localcluster.Node, start time.Time) ([]phaseWindow, error) {
	out := make([]phaseWindow, len(b.plan))
	var (
		restarts sync.WaitGroup
		mu       sync.Mutex
		errs     []error
	)
	defer restarts.Wait()
	var down []int
	for i, p := range b.plan {
		if !sleepUntil(ctx, start.Add(p.From)) {
			return nil, ctx.Err()
		}
		var metered []int
		for n := range nodes {
			switch was, is := slices.Contains(down, n), slices.Contains(p.Down, n); {
			case is && !was:
				if err := nodes[n].Kill(); err != nil {
					return nil, err
				}
			case was && !is:
				restarts.Go(func() {
					if err := cl.Restart(ctx, nodes[n]); err != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("restart n%d: %w", n, err))
						mu.Unlock()
					}
				})
			case !is:
				metered = append(metered, n)
			}
		}
		down = p.Down
		m := &cpuquota.Meter{}
		for _, n := range metered {
			m.Watch(nodes[n].Spec.ID, nodes[n].PID(), b.cc.CPU)
		}
		if err := m.Start(); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if !sleepUntil(ctx, start.Add(p.To)) {
			return nil, ctx.Err()
		}
		judge, used, err := m.Stop()
		if err != nil {
			return nil, err
		}
		w := phaseWindow{window: time.Since(t0), over: len(judge.Over) > 0, starved: judge.Starved, reason: judge.Reason}
		for _, u := range used {
			w.used += u.Used
			w.peak = max(w.peak, u.Used.Seconds()/(w.window.Seconds()*u.Cores))
		}
		w.util = w.used.Seconds() / (w.window.Seconds() * b.cc.CPU * float64(len(used)))
		out[i] = w
	}
	restarts.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// progress prints one scheme's round: every phase's LossPercent and marks.
func (b *classesRunner) progress(round int, sc scheme, rs []phaseResult) {
	var parts []string
	for _, x := range rs {
		s := fmt.Sprintf("%s %.2f (%.0f%% CPU", b.plan[x.Phase].Name, x.loss(), 100*x.Util)
		if x.Failed > 0 {
			s += fmt.Sprintf(", %d failed: %s", x.Failed, x.FirstErr)
		}
		switch {
		case x.Over:
			s += ", QUOTA EXCEEDED: " + x.Reason
		case x.Starved:
			s += ", machine starved"
		}
		parts = append(parts, s+")")
	}
	lag := time.Duration(0)
	for _, x := range rs {
		lag = max(lag, x.Lag)
	}
	fmt.Fprintf(b.out, "  round %d, %-12s LossPercent %s; send lateness ≤ %v\n", round+1, sc, strings.Join(parts, ", "), lag.Round(10*time.Microsecond))
}

// pooledPhase sums one scheme's phase over rounds, all classes or one
// (class ≥ 0).
func pooledPhase(rs []phaseResult, sc scheme, phase, class int) (off, real float64) {
	for _, x := range rs {
		if x.Scheme != sc || x.Phase != phase {
			continue
		}
		if class < 0 {
			off, real = off+x.Offered, real+x.Realized
		} else {
			off, real = off+x.Classes[class].Offered, real+x.Classes[class].Realized
		}
	}
	return off, real
}

// tables prints the LossPercent per phase of both schemes with the
// simulator's beside, the difference, and per class (what Fig 4.12
// shows: who loses in the spike and in the failure).
func (b *classesRunner) tables(rs []phaseResult, sim map[phaseKey]float64) {
	fmt.Fprintf(b.out, "\n%s on %d node processes at %.2f cores: LossPercent per phase, pooled over %d rounds", b.wl.Name, b.cc.Nodes, b.cc.CPU, b.cfg.Rounds)
	if sim != nil {
		fmt.Fprint(b.out, " [simulator beside]")
	}
	fmt.Fprintf(b.out, "\n%-10s %7s %16s %16s %18s\n", "phase", "demand", "class-aware", "partitioning", "CA − P")
	for i, p := range b.plan {
		var loss [2]float64
		var cols [2]string
		for _, sc := range schemes {
			loss[sc] = sched.LossPercent(pooledPhase(rs, sc, i, -1))
			cols[sc] = fmt.Sprintf("%.2f", loss[sc])
			if s, ok := sim[phaseKey{sc, i}]; ok {
				cols[sc] += fmt.Sprintf(" [%.2f]", s)
			}
		}
		gap := fmt.Sprintf("%+.2f", loss[classAware]-loss[partitioning])
		if sim != nil {
			gap += fmt.Sprintf(" [%+.2f]", sim[phaseKey{classAware, i}]-sim[phaseKey{partitioning, i}])
		}
		fmt.Fprintf(b.out, "%-10s %6.0f%% %16s %16s %18s\n", p.Name, b.demand(p), cols[classAware], cols[partitioning], gap)
	}
	var used, spin time.Duration
	for _, x := range rs {
		if x.Scheme == classAware && b.plan[x.Phase].Name == "steady" {
			used, spin = used+x.UsedCPU, spin+x.SpinCPU
		}
	}
	if spin > 0 {
		fmt.Fprintf(b.out, "class-aware, steady: the nodes used %+.0f%% CPU beyond the spin of the answered calls (their own per-call CPU, polls, gossip): the real demand is about that much above the nominal\n",
			100*(float64(used)/float64(spin)-1))
	}
	fmt.Fprintf(b.out, "\nper class, LossPercent pooled over rounds\n%-12s %-7s", "scheme", "class")
	for _, p := range b.plan {
		fmt.Fprintf(b.out, " %10s", p.Name)
	}
	fmt.Fprintln(b.out)
	for _, sc := range schemes {
		for k, c := range b.wl.Classes {
			fmt.Fprintf(b.out, "%-12s %-7s", sc, c.Name)
			for i := range b.plan {
				fmt.Fprintf(b.out, " %10.2f", sched.LossPercent(pooledPhase(rs, sc, i, k)))
			}
			fmt.Fprintln(b.out)
		}
	}
}

// save writes the per-phase rows, their per-class breakdown and the
// pooled losses with the simulator's.
func (b *classesRunner) save(rs []phaseResult, sim map[phaseKey]float64) error {
	prefix := filepath.Join(b.cfg.Out, "bench-sched-classes")
	t := report.NewTable("round", "scheme", "phase", "arrivals", "answered", "expired", "refused", "failed", "offered_yield", "realized_yield",
		"loss_percent", "nodes_quota_use", "starved", "quota_exceeded", "send_lateness_us")
	cls := report.NewTable("round", "scheme", "phase", "class", "arrivals", "answered", "offered_yield", "realized_yield", "mean_response_us")
	for _, x := range rs {
		name := b.plan[x.Phase].Name
		t.Addf("%d,%s,%s,%d,%d,%d,%d,%d,%.1f,%.3f,%.3f,%.3f,%t,%t,%d", x.Round+1, x.Scheme, name, x.Arrivals, x.Done, x.Expired, x.Overloaded, x.Failed,
			x.Offered, x.Realized, x.loss(), x.Util, x.Starved, x.Over, x.Lag.Microseconds())
		for k, c := range x.Classes {
			mean := time.Duration(0)
			if c.Done > 0 {
				mean = c.RespSum / time.Duration(c.Done)
			}
			cls.Addf("%d,%s,%s,%s,%d,%d,%.1f,%.3f,%d", x.Round+1, x.Scheme, name, b.wl.Classes[k].Name, c.Arrivals, c.Done, c.Offered, c.Realized, mean.Microseconds())
		}
	}
	pts := report.NewTable("phase", "from_s", "to_s", "demand_percent", "scheme", "loss_percent", "sim_loss_percent")
	for i, p := range b.plan {
		for _, sc := range schemes {
			simL := math.NaN()
			if v, ok := sim[phaseKey{sc, i}]; ok {
				simL = v
			}
			pts.Addf("%s,%.3f,%.3f,%.0f,%s,%.3f,%.3f", p.Name, p.From.Seconds(), p.To.Seconds(), b.demand(p), sc, sched.LossPercent(pooledPhase(rs, sc, i, -1)), simL)
		}
	}
	for _, f := range []struct {
		t    *report.Table
		name string
	}{{t, "-phases.csv"}, {cls, "-classes.csv"}, {pts, "-loss.csv"}} {
		if err := f.t.Save(prefix + f.name); err != nil {
			return err
		}
	}
	return nil
}
