// Package dacbench is `neptune bench dac`: the Data Aggregation Call
// experiments of the DAC paper (§5, issue 6) on real node processes.
package dacbench

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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/micro"
	"github.com/neptune-cluster/neptune/internal/aggregation"
	"github.com/neptune-cluster/neptune/internal/client"
	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/security"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/localcluster"
	"github.com/neptune-cluster/neptune/lab/report"
)

// dacCall is one measured aggregation; times are offsets from the cell's
// start.
type dacCall struct {
	start, end time.Duration
	// lag is how late the call left against its arrival time: CPU
	// starvation of this (the client) process, not aggregation.
	lag      time.Duration
	ok       bool
	coverage float64
	lost     int // partitions missing from the result
	hedges   int
}

// dacCell is one contender at one rate.
type dacCell struct {
	calls  []dacCall
	window time.Duration // measured arrival window
	errs   map[string]int
}

// measured are the calls that arrived after the warm-up.
func (c dacCell) measured(warmup time.Duration) []dacCall {
	var out []dacCall
	for _, x := range c.calls {
		if x.start >= warmup {
			out = append(out, x)
		}
	}
	return out
}

type dacStats struct {
	n, ok           int
	thr, qthr       float64 // successful calls/s, Σ coverage of successful calls/s
	mean, p99       time.Duration
	okFrac          float64
	hedges, lostAny int
	lag             time.Duration // mean dispatch lateness (bench.StarvedLag)
}

func (c dacCell) stats(warmup time.Duration) dacStats {
	ms := c.measured(warmup)
	s := dacStats{n: len(ms)}
	var lat []time.Duration
	var cov float64
	var lags []time.Duration
	for _, x := range ms {
		lags = append(lags, x.lag)
		s.hedges += x.hedges
		if x.lost > 0 {
			s.lostAny++
		}
		if x.ok {
			s.ok++
			cov += x.coverage
			lat = append(lat, x.end-x.start)
		}
	}
	secs := (c.window - warmup).Seconds()
	s.thr, s.qthr = float64(s.ok)/secs, cov/secs
	if s.n > 0 {
		s.okFrac = float64(s.ok) / float64(s.n)
	}
	sum := report.Summarize(lat)
	s.mean, s.p99 = sum.Mean, sum.P99
	s.lag = report.Mean(lags)
	return s
}

// dacEvent is something done at an offset into a cell (a slowdown).
type dacEvent struct {
	at time.Duration
	do func() error
}

// dacContender is an aggregation template: scheme, hedging, quality, and
// the paper's baselines (uniform timeouts, blocking workers), which only
// the internal client can select.
type dacContender struct {
	label string
	agg   neptune.Aggregation
	x     aggregation.Experiment
}

type dacBench struct {
	out      io.Writer
	exe, dir string
	nodes    int
	deadline time.Duration
	budget   time.Duration
	warmup   time.Duration
	seed     uint64
	goals    Config // the goals' rates and thresholds, fixed before the run
	pause    time.Duration
	outDir   string
	csv      map[string]*report.Table
	verbose  bool
}

// dacCluster is one set of node processes hosting micro, and a client.
type dacCluster struct {
	cl    *localcluster.Cluster
	nodes []*localcluster.Node
	rpc   map[string]string // node id → RPC address
	part  map[string]int    // node id → a partition it hosts
	c     *client.Client    // internal: the experiments select baselines
	conns *transport.Conns
	parts []int
}

func (d *dacCluster) close() {
	d.c.Close()
	d.conns.Close()
	d.cl.Close()
}

// startDACCluster starts n nodes; node i hosts partitions parts(i) of micro
// with workers(i) workers.
func (b *dacBench) startCluster(ctx context.Context, name string, workers func(int) int, parts func(int) []int) (*dacCluster, error) {
	dir := filepath.Join(b.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	d := &dacCluster{cl: localcluster.New(b.exe, dir), rpc: map[string]string{}, part: map[string]int{}, conns: transport.NewConns()}
	all := map[int]bool{}
	for i := range b.nodes {
		for _, p := range parts(i) {
			all[p] = true
		}
		d.part[fmt.Sprintf("d%02d", i+1)] = parts(i)[0]
	}
	start := func(i int) (*localcluster.Node, error) {
		id := fmt.Sprintf("d%02d", i+1)
		ps := parts(i)
		var list []string
		for _, p := range ps {
			list = append(list, strconv.Itoa(p))
		}
		cfg := filepath.Join(dir, id+".yaml")
		yaml := fmt.Sprintf("services:\n  - name: micro\n    partitions: [%s]\n    workers: %d\n", strings.Join(list, ", "), workers(i))
		if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
			return nil, err
		}
		return d.cl.Start(ctx, localcluster.Spec{ID: id, Args: []string{"--config", cfg, "--log-level", "warn"}})
	}
	fail := func(err error) (*dacCluster, error) {
		d.conns.Close()
		d.cl.Close()
		return nil, err
	}
	first, err := start(0)
	if err != nil {
		return fail(err)
	}
	d.nodes = make([]*localcluster.Node, b.nodes)
	d.nodes[0] = first
	// The rest join the first, eight at a time.
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for i := 1; i < b.nodes; i++ {
		wg.Go(func() {
			n, err := start(i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			d.nodes[i] = n
		})
		if i%8 == 0 {
			wg.Wait()
		}
	}
	wg.Wait()
	if firstErr != nil {
		return fail(firstErr)
	}
	for p := range all {
		d.parts = append(d.parts, p)
	}
	slices.Sort(d.parts)
	// Join through every node: memberlist spreads a joiner to the others
	// with few retransmissions, so a node that missed them would not send
	// its announcements to this client until its next push/pull (15 s),
	// and its entry, and partition, would expire here meanwhile.
	var seeds []string
	for _, n := range d.nodes {
		seeds = append(seeds, n.GossipAddr)
	}
	insecure, err := security.Load(security.Config{Insecure: true})
	if err != nil {
		return fail(err)
	}
	d.c, err = client.New(ctx, client.Config{Client: config.Client{Join: seeds}, Material: insecure})
	if err != nil {
		return fail(err)
	}
	if err := localcluster.WaitMembers(ctx, d.c, b.nodes, 30*time.Second); err != nil {
		d.close()
		return nil, err
	}
	for _, m := range d.c.Members(ctx, 0) {
		d.rpc[m.Node] = m.RPCAddr
	}
	return d, nil
}

// slowdown sets the micro operators' cost factor on node i directly.
func (d *dacCluster) slowdown(ctx context.Context, i int, factor float64) error {
	id := d.nodes[i].Spec.ID
	cl, err := d.conns.ClientFor(id, d.rpc[id])
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = cl.Call(ctx, &pb.CallRequest{Service: "micro", Partition: int32(d.part[id]), Method: "slowdown", Mode: pb.Mode(neptune.Write),
		Body: []byte(strconv.FormatFloat(factor, 'g', -1, 64))})
	if err != nil {
		return fmt.Errorf("bench dac: slow down %s: %w", id, transport.FromStatus(id, err))
	}
	return nil
}

// run offers rate aggregations/s for dur (Poisson arrivals, seeded) and
// waits for every call to end.
func (b *dacBench) run(ctx context.Context, d *dacCluster, con dacContender, rate float64, dur time.Duration, events []dacEvent) (dacCell, error) {
	// Common random numbers: every contender of a row (same rate and
	// window) gets the same arrival times, so rows differ only by scheme.
	rng := rand.New(rand.NewPCG(b.seed, math.Float64bits(rate)^uint64(dur)))
	agg := con.agg
	agg.Service, agg.Partitions, agg.Local, agg.Reduce = "micro", d.parts, micro.LocalOp, micro.ReduceOp
	agg.Deadline, agg.ReduceBudget = b.deadline, b.budget
	var (
		mu    sync.Mutex
		calls []dacCall
		errs  = map[string]int{}
		wg    sync.WaitGroup
	)
	start := time.Now()
	var evErr error
	for _, ev := range events {
		wg.Go(func() {
			select {
			case <-time.After(ev.at):
			case <-ctx.Done():
				return
			}
			if err := ev.do(); err != nil {
				mu.Lock()
				evErr = err
				mu.Unlock()
			}
		})
	}
	for next := time.Duration(0); next < dur; next += time.Duration(rng.ExpFloat64() / rate * float64(time.Second)) {
		select {
		case <-time.After(time.Until(start.Add(next))):
		case <-ctx.Done():
			wg.Wait()
			return dacCell{}, ctx.Err()
		}
		at := next
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, b.deadline+3*time.Second)
			defer cancel()
			t0 := time.Since(start)
			res, err := d.c.Aggregate(cctx, agg, con.x)
			// ok: the call met its quality guarantee by the deadline.
			x := dacCall{start: t0, end: time.Since(start), lag: max(t0-at, 0), ok: err == nil, lost: len(d.parts)}
			if res != nil {
				x.coverage, x.lost, x.hedges = res.Coverage, len(d.parts)-len(res.Contributing), res.Hedges
			}
			mu.Lock()
			calls = append(calls, x)
			if err != nil {
				errs[dacErrKind(err)]++
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if evErr != nil {
		return dacCell{}, evErr
	}
	// Let cancelled work leave the queues before the next contender.
	time.Sleep(b.pause)
	if b.verbose && len(errs) > 0 {
		fmt.Fprintf(b.out, "    (%s at %.0f/s: %d of %d calls failed: %v)\n", con.label, rate, sumCounts(errs), len(calls), errs)
	}
	return dacCell{calls: calls, window: dur, errs: errs}, nil
}

// dacErrKind shortens an aggregation error to its kind for the verbose
// failure counts.
func dacErrKind(err error) string {
	if errors.Is(err, neptune.ErrBelowQuality) {
		return "below quality"
	}
	s := err.Error()
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// Sections are the parts of `neptune bench dac`, in the order they run:
// trees (Figs 14-17), ed (Figs 18-19), fig20, stop (SIGSTOPped nodes) and
// hedge (replication 2 with hedging).
var Sections = []string{"trees", "ed", "fig20", "stop", "hedge"}

// Config are the knobs of `neptune bench dac`.
type Config struct {
	// Sections lists the parts to run, of Sections.
	Sections []string
	// Nodes are node processes, one micro partition each, with Workers
	// workers (a dual-CPU node of the paper); in the heterogeneous setting
	// Fast of them have twice the workers.
	Nodes, Workers, Fast int
	// Cell is the arrival window per contender per rate, of which Warmup
	// is not measured.
	Cell, Warmup time.Duration
	// Rates are the request rates (aggregations/s) of Figs 14-17, EDRates
	// those of Figs 18-19 (event-driven vs blocking).
	Rates, EDRates []float64
	// Deadline is the aggregation deadline T; Budget the staged-timeout
	// budget per reduction rank (a; 4× the mean reduction).
	Deadline, Budget time.Duration
	// TreesGoalRate is the "high load" rate of the trees goal (LAT's mean
	// response at least TreesGoal percent below Flat's and Binomial's,
	// heterogeneous setting), fixed before the run; it is added to Rates
	// if missing.
	TreesGoalRate, TreesGoal float64
	// Fig20Rate is Fig 20's request rate and Fig20Len its timeline
	// (paper: 60 s): node A is slow from len/6 to len/2, node B from len/3
	// to 2len/3. Fig20Goal is the goal's least ratio of EP+ED's
	// quality-aware throughput to None's and Base's while both nodes are
	// slow. The paper ran at 75% of capacity; here None and Base are
	// already overloaded at 25 and 45 req/s before any node is slow (a
	// ratio to them would measure their collapse), so the rate is 10, the
	// highest of 10, 25, 45 at which both complete their calls while the
	// cluster is healthy (2026-11-27), and the timeline 36 s, so the
	// both-slow window is 4 s rather than 1.
	Fig20Rate float64
	Fig20Len  time.Duration
	Fig20Goal float64
	// Slow is the slowdown factor of the slow nodes in fig20 and hedge.
	Slow float64
	// StopRate is the request rate with StopK (each) SIGSTOPped nodes.
	StopRate float64
	StopK    []int
	// HedgeRate and HedgeCell are the rate and the arrival window per
	// contender of the hedge section.
	HedgeRate float64
	HedgeCell time.Duration
	// Seed seeds the arrivals.
	Seed uint64
	// Out is the directory for CSV and SVG files (empty: none; it must
	// exist).
	Out string
	// Verbose prints the failed calls of every cell by error.
	Verbose bool
}

// DefaultConfig is the paper's setting on 24 node processes.
func DefaultConfig() Config {
	return Config{Sections: Sections, Nodes: 24, Workers: 2, Fast: 4, Cell: 3 * time.Second, Warmup: 500 * time.Millisecond,
		Rates: []float64{20, 40, 55, 65}, EDRates: []float64{5, 10, 30, 65}, Deadline: 2 * time.Second, Budget: 20 * time.Millisecond,
		TreesGoalRate: 65, TreesGoal: 35, Fig20Goal: 1.25, Fig20Rate: 10, Fig20Len: 36 * time.Second, Slow: 5, StopRate: 20, StopK: []int{1, 2}, HedgeRate: 40, HedgeCell: 8 * time.Second,
		Seed: 1, Out: "out/dac"}
}

// minFig20Len is the shortest Fig 20 timeline whose judged windows hold
// at least one whole second each.
const minFig20Len = 18 * time.Second

// Validate names the first bad field.
func (c Config) Validate() error {
	for _, r := range append(slices.Clone(c.Rates), append(c.EDRates, c.TreesGoalRate, c.Fig20Rate, c.StopRate, c.HedgeRate)...) {
		if !(r > 0) {
			return fmt.Errorf("dacbench: rate %v is not positive", r)
		}
	}
	for _, k := range c.StopK {
		if k < 1 || k >= c.Nodes/2 {
			return fmt.Errorf("dacbench: %d stopped nodes is not a count in 1..%d", k, c.Nodes/2-1)
		}
	}
	for _, s := range c.Sections {
		if !slices.Contains(Sections, s) {
			return fmt.Errorf("dacbench: unknown section %q (want %v)", s, Sections)
		}
	}
	switch {
	case c.Nodes < 4:
		return fmt.Errorf("dacbench: nodes must be >= 4, got %d", c.Nodes)
	case c.Workers < 1 || c.Fast < 0 || c.Fast > c.Nodes:
		return errors.New("dacbench: workers must be >= 1 and fast in 0..nodes")
	case c.Cell <= c.Warmup || c.HedgeCell <= c.Warmup:
		return fmt.Errorf("dacbench: cell and hedge cell must exceed the warm-up (%v)", c.Warmup)
	case !(c.TreesGoal > 0 && c.Fig20Goal > 0):
		return errors.New("dacbench: goal thresholds must be > 0")
	case c.Deadline <= 0 || c.Budget <= 0 || c.Slow < 1 || c.Fig20Len < minFig20Len:
		// Shorter, the healthy (1 s–len/6) or both-slow (len/3+2 s–len/2)
		// window of whole seconds is empty and the goal judges nothing.
		return fmt.Errorf("dacbench: deadline and budget must be > 0, slow >= 1, fig20 length >= %v", minFig20Len)
	}
	return nil
}

// Run is `neptune bench dac`: open-loop Poisson arrivals of aggregations
// over every partition of the micro service (local ~Exp(25 ms), reduce
// ~Exp(5 ms), emulated by sleeping so 24+ nodes fit on two cores; a node's
// capacity is its number of workers). Every contender of a row runs on the
// same cluster, one after the other.
func Run(ctx context.Context, cfg Config, stdout io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	secs := cfg.Sections
	if !slices.Contains(cfg.Rates, cfg.TreesGoalRate) {
		cfg.Rates = append(slices.Clone(cfg.Rates), cfg.TreesGoalRate)
		slices.Sort(cfg.Rates)
	}
	exe, dir, cleanup, err := localcluster.Scratch("neptune-bench-dac-")
	if err != nil {
		return err
	}
	defer cleanup()
	b := &dacBench{out: stdout, exe: exe, dir: dir, nodes: cfg.Nodes, deadline: cfg.Deadline, budget: cfg.Budget, warmup: cfg.Warmup,
		seed: cfg.Seed, goals: cfg, pause: 300 * time.Millisecond, outDir: cfg.Out, csv: map[string]*report.Table{}, verbose: cfg.Verbose}
	began := time.Now()
	fmt.Fprintf(stdout, "bench dac: %d node processes, micro (local ~Exp(25ms), reduce ~Exp(5ms), sleep-emulated), %d workers per node, deadline %v, staged budget %v, seed %d\n",
		cfg.Nodes, cfg.Workers, cfg.Deadline, cfg.Budget, cfg.Seed)

	one := func(i int) []int { return []int{i} }
	homo := func(int) int { return cfg.Workers }
	if slices.ContainsFunc(secs, func(s string) bool { return s != "hedge" }) {
		d, err := b.startCluster(ctx, "homogeneous", homo, one)
		if err != nil {
			return err
		}
		err = b.homogeneous(ctx, d, secs, cfg.Workers, cfg.Rates, cfg.EDRates, cfg.Fig20Rate, cfg.Fig20Len, cfg.Slow, cfg.StopRate, cfg.StopK, cfg.Cell)
		d.close()
		if err != nil {
			return err
		}
	}
	if slices.Contains(secs, "trees") && cfg.Fast > 0 {
		// Fast nodes spread over the ids (not the Base coordinator d01).
		every := cfg.Nodes / cfg.Fast
		hetero := func(i int) int {
			if i%every == every-1 && i/every < cfg.Fast {
				return 2 * cfg.Workers
			}
			return cfg.Workers
		}
		d, err := b.startCluster(ctx, "heterogeneous", hetero, one)
		if err != nil {
			return err
		}
		total := 0
		for i := range cfg.Nodes {
			total += hetero(i)
		}
		err = b.trees(ctx, d, "heterogeneous", fmt.Sprintf("%d nodes with %d workers, %d with %d", cfg.Nodes-cfg.Fast, cfg.Workers, cfg.Fast, 2*cfg.Workers), total, cfg.Rates, cfg.Cell, true)
		d.close()
		if err != nil {
			return err
		}
	}
	if slices.Contains(secs, "hedge") {
		// Each partition on two nodes: node i hosts i and i+1.
		two := func(i int) []int { return []int{i, (i + 1) % cfg.Nodes} }
		d, err := b.startCluster(ctx, "replicated", homo, two)
		if err != nil {
			return err
		}
		err = b.hedge(ctx, d, cfg.HedgeRate, cfg.HedgeCell, cfg.Slow)
		d.close()
		if err != nil {
			return err
		}
	}
	if cfg.Out != "" {
		for name, t := range b.csv {
			if err := t.Save(filepath.Join(cfg.Out, name)); err != nil {
				return err
			}
		}
		fmt.Fprintf(stdout, "\nwrote CSV and SVG files to %s\n", cfg.Out)
	}
	fmt.Fprintf(stdout, "bench dac took %v\n", time.Since(began).Round(time.Second))
	return nil
}

// csvf adds a row (see report.Table.Addf) to the CSV file name, with
// header (comma-separated) if it is new.
func (b *dacBench) csvf(name, header, format string, args ...any) {
	t := b.csv[name]
	if t == nil {
		t = report.NewTable(strings.Split(header, ",")...)
		b.csv[name] = t
	}
	t.Addf(format, args...)
}

func (b *dacBench) homogeneous(ctx context.Context, d *dacCluster, secs []string, workers int, treeRates, edRates []float64, f20Rate float64, f20Len time.Duration, slow, stopRate float64, ks []int, cell time.Duration) error {
	if slices.Contains(secs, "trees") {
		if err := b.trees(ctx, d, "homogeneous", fmt.Sprintf("%d nodes with %d workers", b.nodes, workers), b.nodes*workers, treeRates, cell, false); err != nil {
			return err
		}
	}
	if slices.Contains(secs, "ed") {
		if err := b.ed(ctx, d, edRates, cell); err != nil {
			return err
		}
	}
	if slices.Contains(secs, "fig20") {
		if err := b.fig20(ctx, d, f20Rate, f20Len, slow); err != nil {
			return err
		}
	}
	if slices.Contains(secs, "stop") {
		if err := b.stop(ctx, d, stopRate, ks, cell); err != nil {
			return err
		}
	}
	return nil
}

var dacSchemes = []dacContender{
	{label: "base", agg: neptune.Aggregation{Scheme: neptune.SchemeBase}},
	{label: "flat", agg: neptune.Aggregation{Scheme: neptune.SchemeFlat}},
	{label: "binomial", agg: neptune.Aggregation{Scheme: neptune.SchemeBinomial}},
	{label: "lat", agg: neptune.Aggregation{Scheme: neptune.SchemeLAT}},
}

// ideal is the paper's ideal throughput n·k/(n·s + (n−1)·r) with k the
// mean workers per node.
func (b *dacBench) ideal(totalWorkers int) float64 {
	n := float64(b.nodes)
	return float64(totalWorkers) / (n*0.025 + (n-1)*0.005)
}

// trees is Fig 14–17: throughput and mean/p99 response time of successful
// calls (ρ = 1, every partition by the deadline) per scheme and rate.
func (b *dacBench) trees(ctx context.Context, d *dacCluster, setting, desc string, totalWorkers int, rates []float64, cell time.Duration, goal bool) error {
	fmt.Fprintf(b.out, "\n== Fig 14-17 (%s): %s; ideal throughput %.1f/s; ρ=1; %v per cell\n", setting, desc, b.ideal(totalWorkers), cell)
	fmt.Fprintf(b.out, "  rate | throughput/s base flat bin lat | mean ms base flat bin lat         | p99 ms base flat bin lat          | LAT mean vs flat, bin\n")
	res := map[float64][]dacStats{}
	var sThr, sMean []report.Series
	for _, s := range dacSchemes {
		sThr = append(sThr, report.Series{Name: s.label})
		sMean = append(sMean, report.Series{Name: s.label})
	}
	for _, rate := range rates {
		var row []dacStats
		for i, con := range dacSchemes {
			c, err := b.run(ctx, d, con, rate, cell, nil)
			if err != nil {
				return err
			}
			st := c.stats(b.warmup)
			row = append(row, st)
			b.csvf("dac_real_trees.csv", "setting,rate,scheme,n,ok,throughput,mean_ms,p99_ms", "%s,%g,%s,%d,%d,%.2f,%.1f,%.1f",
				setting, rate, con.label, st.n, st.ok, st.thr, report.Ms(st.mean), report.Ms(st.p99))
			sThr[i].Add(rate, st.thr)
			if st.ok > 0 {
				sMean[i].Add(rate, report.Ms(st.mean))
			}
		}
		res[rate] = row
		ms := func(x dacStats, f func(dacStats) time.Duration) string {
			if x.ok == 0 {
				return "      -"
			}
			return fmt.Sprintf("%7.1f", report.Ms(f(x)))
		}
		mean := func(x dacStats) time.Duration { return x.mean }
		p99 := func(x dacStats) time.Duration { return x.p99 }
		fmt.Fprintf(b.out, "%6.1f | %6.1f %6.1f %6.1f %6.1f | %s %s %s %s | %s %s %s %s | %5.0f%% %5.0f%%\n", rate,
			row[0].thr, row[1].thr, row[2].thr, row[3].thr,
			ms(row[0], mean), ms(row[1], mean), ms(row[2], mean), ms(row[3], mean),
			ms(row[0], p99), ms(row[1], p99), ms(row[2], p99), ms(row[3], p99),
			dacBelow(row[3], row[1]), dacBelow(row[3], row[2]))
	}
	// High load is an input (TreesGoalRate), not chosen from the results.
	c := treesVerdict(b.goals.TreesGoalRate, b.goals.TreesGoal, res[b.goals.TreesGoalRate])
	if goal {
		fmt.Fprintf(b.out, "%s\n", c)
	} else {
		fmt.Fprintf(b.out, "(not judged in this setting) %s: %s\n", c.Goal, c.Measured)
	}
	return b.svg("dac_real_"+setting+"_throughput.svg", "Fig 14/16 real nodes ("+setting+"): throughput", "request rate (/s)", "successful calls/s", sThr,
		"dac_real_"+setting+"_response.svg", "Fig 15/17 real nodes ("+setting+"): mean response", "request rate (/s)", "mean ms", sMean)
}

// healthyFrac is the least fraction of calls a baseline must complete at
// a goal's operating point: a baseline that collapsed there is not one to
// compare against (its successful calls are survivors; its throughput is
// ~0, so any ratio to it is ∞).
const healthyFrac = 0.5

// treesVerdict judges "LAT's mean response ≥ goal % below Flat's and
// Binomial's at rate" on the row of that rate (base, flat, binomial,
// lat). LAT itself completing under healthyFrac is a FAIL; a baseline
// doing so, or a starved cell, makes it INCONCLUSIVE.
func treesVerdict(rate, goal float64, row []dacStats) *report.Check {
	c := &report.Check{Goal: fmt.Sprintf("LAT mean ≥ %g%% below Flat and Binomial at %g/s (high load, fixed before the run)", goal, rate)}
	if len(row) < 4 {
		return c.Doubt(true, "no cell ran at %g/s", rate)
	}
	flat, bin, lat := row[1], row[2], row[3]
	vf, vb := dacBelow(lat, flat), dacBelow(lat, bin)
	c.Met = lat.okFrac >= healthyFrac && vf >= goal && vb >= goal
	c.Measured = fmt.Sprintf("%.0f%% below Flat, %.0f%% below Binomial; completed LAT %.0f%%, Flat %.0f%%, Binomial %.0f%%; throughput LAT/Flat %.2f, LAT/Binomial %.2f",
		vf, vb, 100*lat.okFrac, 100*flat.okFrac, 100*bin.okFrac, lat.thr/flat.thr, lat.thr/bin.thr)
	for _, x := range []struct {
		name string
		s    dacStats
	}{{"Flat", flat}, {"Binomial", bin}} {
		c.Doubt(x.s.okFrac < healthyFrac, "baseline %s is unhealthy at %g/s: it completed %.0f%% of calls (< %.0f%%); choose a lower --trees-goal-rate", x.name, rate, 100*x.s.okFrac, 100*healthyFrac)
	}
	for _, x := range []struct {
		name string
		s    dacStats
	}{{"Flat", flat}, {"Binomial", bin}, {"LAT", lat}} {
		cond, why := bench.Starved("the "+x.name+" cell's client", x.s.lag)
		c.Doubt(cond, "%s", why)
	}
	return c
}

// dacRatio prints a/b, or "∞×" when b is zero.
func dacRatio(a, b float64) string {
	if b == 0 {
		return "∞×"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// dacBelow is how many percent a's mean response is below b's.
func dacBelow(a, b dacStats) float64 {
	if a.ok == 0 || b.ok == 0 {
		return math.NaN()
	}
	return 100 * (1 - float64(a.mean)/float64(b.mean))
}

// ed is Fig 18–19: event-driven aggregation against blocking workers
// (LAT, staged timeouts, ρ = 1).
func (b *dacBench) ed(ctx context.Context, d *dacCluster, rates []float64, cell time.Duration) error {
	fmt.Fprintf(b.out, "\n== Fig 18-19: event-driven (ED) vs blocking workers (NoED), LAT, staged timeouts, ρ=1, %v per cell\n", cell)
	fmt.Fprintf(b.out, "  rate | throughput/s ED NoED | mean ms ED  NoED  | p99 ms ED   NoED   | ED/NoED throughput\n")
	cons := []dacContender{{label: "ED"}, {label: "NoED", x: aggregation.Experiment{Blocking: true}}}
	sThr := []report.Series{{Name: "ED"}, {Name: "NoED"}}
	sMean := []report.Series{{Name: "ED"}, {Name: "NoED"}}
	for _, rate := range rates {
		var st [2]dacStats
		for i, con := range cons {
			c, err := b.run(ctx, d, con, rate, cell, nil)
			if err != nil {
				return err
			}
			st[i] = c.stats(b.warmup)
			b.csvf("dac_real_ed.csv", "rate,mode,n,ok,throughput,mean_ms,p99_ms", "%g,%s,%d,%d,%.2f,%.1f,%.1f", rate, con.label, st[i].n, st[i].ok, st[i].thr, report.Ms(st[i].mean), report.Ms(st[i].p99))
			sThr[i].Add(rate, st[i].thr)
			if st[i].ok > 0 {
				sMean[i].Add(rate, report.Ms(st[i].mean))
			}
		}
		ratio := "     -"
		if st[1].thr > 0 {
			ratio = fmt.Sprintf("%6.2f", st[0].thr/st[1].thr)
		}
		fmt.Fprintf(b.out, "%6.1f | %6.1f %6.1f | %7.1f %7.1f | %7.1f %7.1f | %s\n", rate, st[0].thr, st[1].thr,
			report.Ms(st[0].mean), report.Ms(st[1].mean), report.Ms(st[0].p99), report.Ms(st[1].p99), ratio)
	}
	return b.svg("dac_real_ed_throughput.svg", "Fig 18 real nodes: throughput, ED vs NoED", "request rate (/s)", "successful calls/s", sThr,
		"dac_real_ed_response.svg", "Fig 19 real nodes: mean response, ED vs NoED", "request rate (/s)", "mean ms", sMean)
}

// fig20 is Fig 20: quality-aware throughput over time while node A and
// then node B are slowed down and healed, for the four combinations of
// eager pruning (EP: LAT + staged timeouts; without: Binomial + uniform
// timeouts) and event-driven aggregation (ED; without: blocking workers),
// and for Base (the caller gathers and reduces everything).
func (b *dacBench) fig20(ctx context.Context, d *dacCluster, rate float64, length time.Duration, slow float64) error {
	aOn, bOn, aOff, bOff := length/6, length/3, length/2, 2*length/3
	// Two interior-prone nodes away from d01; any pair would do.
	na, nb := b.nodes/3, 2*b.nodes/3
	fmt.Fprintf(b.out, "\n== Fig 20: quality-aware throughput (Σ coverage of calls meeting ρ=0.5, per 1 s of completion), %.0f req/s; %s %g× slow %v–%v, %s %v–%v\n",
		rate, d.nodes[na].Spec.ID, slow, aOn, aOff, d.nodes[nb].Spec.ID, bOn, bOff)
	cons := []dacContender{
		{"None", neptune.Aggregation{Scheme: neptune.SchemeBinomial, Quality: 0.5}, aggregation.Experiment{UniformTimeouts: true, Blocking: true}},
		{"EP only", neptune.Aggregation{Scheme: neptune.SchemeLAT, Quality: 0.5}, aggregation.Experiment{Blocking: true}},
		{"ED only", neptune.Aggregation{Scheme: neptune.SchemeBinomial, Quality: 0.5}, aggregation.Experiment{UniformTimeouts: true}},
		{label: "EP+ED", agg: neptune.Aggregation{Scheme: neptune.SchemeLAT, Quality: 0.5}},
		{label: "Base", agg: neptune.Aggregation{Scheme: neptune.SchemeBase, Quality: 0.5}},
	}
	set := func(i int, f float64) func() error { return func() error { return d.slowdown(ctx, i, f) } }
	events := []dacEvent{{aOn, set(na, slow)}, {bOn, set(nb, slow)}, {aOff, set(na, 1)}, {bOff, set(nb, 1)}}
	secs := int(length / time.Second)
	series := make([][]float64, len(cons))
	type window struct {
		label    string
		from, to time.Duration
	}
	wins := []window{{"healthy", time.Second, aOn}, {"one slow", aOn + 2*time.Second, bOn}, {"both slow", bOn + 2*time.Second, aOff}, {"degraded (A on → B off)", aOn, bOff}, {"healed", bOff + 2*time.Second, length}}
	avg := make([][]float64, len(cons))
	lostOne := make([]float64, len(cons))
	lags := make([]time.Duration, len(cons))
	var lines []report.Series
	for i, con := range cons {
		c, err := b.run(ctx, d, con, rate, length, events)
		if err := errors.Join(err, set(na, 1)(), set(nb, 1)()); err != nil {
			return err
		}
		series[i] = make([]float64, secs+3)
		var slowCalls, slowLost int
		for _, x := range c.calls {
			if x.ok {
				if s := int(x.end / time.Second); s < len(series[i]) {
					series[i][s] += x.coverage
				}
			}
			if x.start >= bOn+2*time.Second && x.start < aOff {
				slowCalls++
				slowLost += x.lost
			}
		}
		lostOne[i] = float64(slowLost) / math.Max(float64(slowCalls), 1)
		lags[i] = c.stats(0).lag
		l := report.Series{Name: con.label}
		for s, v := range series[i] {
			l.Add(float64(s), v)
			b.csvf("dac_real_fig20.csv", "scheme,second,quality_throughput", "%s,%d,%.2f", con.label, s, v)
		}
		lines = append(lines, l)
		for _, w := range wins {
			var sum float64
			n := 0
			for s := int(w.from / time.Second); s < int(w.to/time.Second) && s < len(series[i]); s++ {
				sum += series[i][s]
				n++
			}
			avg[i] = append(avg[i], sum/math.Max(float64(n), 1))
		}
	}
	fmt.Fprintf(b.out, "%-8s", "second")
	for _, con := range cons {
		fmt.Fprintf(b.out, " %8s", con.label)
	}
	fmt.Fprintln(b.out)
	for s := range secs + 3 {
		fmt.Fprintf(b.out, "%-8d", s)
		for i := range cons {
			fmt.Fprintf(b.out, " %8.1f", series[i][s])
		}
		fmt.Fprintln(b.out)
	}
	fmt.Fprintf(b.out, "mean quality-aware throughput per window (ratio to None):\n")
	for wi, w := range wins {
		fmt.Fprintf(b.out, "  %-26s", fmt.Sprintf("%s %v–%v", w.label, w.from, w.to))
		for i, con := range cons {
			fmt.Fprintf(b.out, " %s %.1f (%s)", con.label, avg[i][wi], dacRatio(avg[i][wi], avg[0][wi]))
		}
		fmt.Fprintln(b.out)
	}
	fmt.Fprintf(b.out, "  partitions lost per call arriving while both are slow:")
	for i, con := range cons {
		fmt.Fprintf(b.out, " %s %.2f", con.label, lostOne[i])
	}
	fmt.Fprintln(b.out)
	const healthy, both = 0, 2 // indices of "healthy" and "both slow" in wins
	var f20 []fig20Score
	for i, con := range cons {
		f20 = append(f20, fig20Score{label: con.label, healthy: avg[i][healthy], both: avg[i][both], lag: lags[i]})
	}
	fmt.Fprintf(b.out, "%s\n", fig20Verdict(rate, b.goals.Fig20Goal, f20[3], f20[0], f20[4]))
	return b.svg("dac_real_fig20.svg", "Fig 20 real nodes: quality-aware throughput", "second", "Σ coverage / s", lines, "", "", "", "", nil)
}

// fig20Score is one Fig 20 contender's mean quality-aware throughput in
// the healthy and the both-slow windows, and its cell's mean dispatch
// lateness.
type fig20Score struct {
	label         string
	healthy, both float64
	lag           time.Duration
}

// fig20Verdict judges "EP+ED's quality-aware throughput while both nodes
// are slow ≥ goal× each baseline's". A baseline is healthy at rate only
// if, before any node is slow, it delivers at least healthyFrac of the
// offered rate: one that scores ~0 even then is overloaded at this rate
// (blocking workers), the ratio to it is ∞ and measures nothing, so the
// goal is INCONCLUSIVE with the reason, never PASS.
func fig20Verdict(rate, goal float64, epED fig20Score, baselines ...fig20Score) *report.Check {
	c := &report.Check{Goal: fmt.Sprintf("quality-aware throughput with 2 slow nodes ≥ %g× the baselines at %g/s (EP+ED vs", goal, rate), Met: true}
	var ms []string
	for _, bl := range baselines {
		c.Goal += " " + bl.label
		r := epED.both / bl.both
		c.Met = c.Met && r >= goal
		ms = append(ms, fmt.Sprintf("%s vs %s", dacRatio(epED.both, bl.both), bl.label))
		c.Doubt(bl.healthy < healthyFrac*rate, "baseline %s is unhealthy at %g/s: %.1f/s before any node is slow (< %.0f%% of the offered rate), so the ratio to it measures its overload; choose a lower --fig20-rate",
			bl.label, rate, bl.healthy, 100*healthyFrac)
		cond, why := bench.Starved("the "+bl.label+" cell's client", bl.lag)
		c.Doubt(cond, "%s", why)
	}
	c.Goal += ", both-slow window)"
	c.Measured = fmt.Sprintf("%s (EP+ED %.1f/s)", strings.Join(ms, ", "), epED.both)
	cond, why := bench.Starved("the EP+ED cell's client", epED.lag)
	c.Doubt(cond, "%s", why)
	return c
}

// stop SIGSTOPs k nodes and counts, per call, the partitions lost: with
// LAT and staged timeouts each call should lose exactly the k stopped
// nodes' partitions; Binomial with uniform timeouts is the contrast.
func (b *dacBench) stop(ctx context.Context, d *dacCluster, rate float64, ks []int, cell time.Duration) error {
	fmt.Fprintf(b.out, "\n== Unresponsive nodes (SIGSTOP), hedging off, one replica per partition, ρ=0.5, %.0f req/s, %v per cell\n", rate, cell)
	fmt.Fprintf(b.out, "%3s %-22s %6s %10s %10s %10s %9s\n", "k", "scheme", "calls", "lost<k", "lost=k", "lost>k", "mean lost")
	cons := []dacContender{
		{label: "LAT + staged", agg: neptune.Aggregation{Scheme: neptune.SchemeLAT, Quality: 0.5}},
		{"Binomial + uniform", neptune.Aggregation{Scheme: neptune.SchemeBinomial, Quality: 0.5}, aggregation.Experiment{UniformTimeouts: true}},
	}
	var verdicts []string
	var worstLag time.Duration
	for _, k := range ks {
		var stopped []*localcluster.Node
		for j := range k {
			n := d.nodes[(j+1)*b.nodes/(k+1)]
			if err := n.Pause(); err != nil {
				return err
			}
			stopped = append(stopped, n)
		}
		var exact float64
		for i, con := range cons {
			c, err := b.run(ctx, d, con, rate, cell, nil)
			if err != nil {
				return err
			}
			ms := c.measured(b.warmup)
			var less, eq, more, sum int
			for _, x := range ms {
				sum += x.lost
				switch {
				case x.lost < k:
					less++
				case x.lost == k:
					eq++
				default:
					more++
				}
			}
			n := math.Max(float64(len(ms)), 1)
			fmt.Fprintf(b.out, "%3d %-22s %6d %9.1f%% %9.1f%% %9.1f%% %9.2f\n", k, con.label, len(ms), 100*float64(less)/n, 100*float64(eq)/n, 100*float64(more)/n, float64(sum)/n)
			if i == 0 {
				exact = float64(eq) / n
				worstLag = max(worstLag, c.stats(b.warmup).lag)
			}
		}
		for _, n := range stopped {
			if err := n.Resume(); err != nil {
				return err
			}
		}
		// Give the resumed nodes time to work off their backlog and rejoin
		// before the next k (or anything else) runs: meanwhile they are
		// unresponsive nodes the next cell does not count.
		time.Sleep(2 * time.Second)
		verdicts = append(verdicts, fmt.Sprintf("k=%d: %.1f%%", k, 100*exact))
		if exact < 1 {
			verdicts[len(verdicts)-1] = "FAIL " + verdicts[len(verdicts)-1]
		}
	}
	ok := !slices.ContainsFunc(verdicts, func(s string) bool { return strings.HasPrefix(s, "FAIL") })
	c := &report.Check{Goal: "exactly k nodes' partitions lost in every call (LAT + staged, hedging off)", Met: ok, Measured: strings.Join(verdicts, ", ")}
	cond, why := bench.Starved("the LAT cells' client", worstLag)
	fmt.Fprintf(b.out, "%s\n", c.Doubt(cond, "%s", why))
	return nil
}

// hedge runs on a cluster where every partition has two replicas: with
// two nodes SIGSTOPped, and with two nodes slowed down, hedging off and on.
func (b *dacBench) hedge(ctx context.Context, d *dacCluster, rate float64, cell time.Duration, slow float64) error {
	fmt.Fprintf(b.out, "\n== Replication 2 (node i hosts partitions i and i+1), LAT + staged, ρ=0.5, %.0f req/s, %v per cell\n", rate, cell)
	fmt.Fprintf(b.out, "%-26s %-10s %6s %12s %10s %8s %9s %9s\n", "fault", "hedging", "calls", "none lost", "mean lost", "hedges", "mean ms", "p99 ms")
	na, nb := b.nodes/3, 2*b.nodes/3
	cons := []dacContender{
		{label: "off", agg: neptune.Aggregation{Quality: 0.5}},
		{label: "on", agg: neptune.Aggregation{Quality: 0.5, Hedge: true}},
	}
	var onStopped float64
	var onCalls int
	var onLag time.Duration
	faults := []struct {
		label   string
		on, off func() error
	}{
		{fmt.Sprintf("%s, %s SIGSTOPped", d.nodes[na].Spec.ID, d.nodes[nb].Spec.ID),
			func() error { return errors.Join(d.nodes[na].Pause(), d.nodes[nb].Pause()) },
			func() error { return errors.Join(d.nodes[na].Resume(), d.nodes[nb].Resume()) }},
		{fmt.Sprintf("%s, %s %g× slow", d.nodes[na].Spec.ID, d.nodes[nb].Spec.ID, slow),
			func() error { return errors.Join(d.slowdown(ctx, na, slow), d.slowdown(ctx, nb, slow)) },
			func() error { return errors.Join(d.slowdown(ctx, na, 1), d.slowdown(ctx, nb, 1)) }},
	}
	for fi, f := range faults {
		if err := f.on(); err != nil {
			return err
		}
		for _, con := range cons {
			c, err := b.run(ctx, d, con, rate, cell, nil)
			if err != nil {
				return errors.Join(err, f.off())
			}
			st := c.stats(b.warmup)
			ms := c.measured(b.warmup)
			var lost int
			for _, x := range ms {
				lost += x.lost
			}
			n := math.Max(float64(len(ms)), 1)
			none := 1 - float64(st.lostAny)/n
			fmt.Fprintf(b.out, "%-26s %-10s %6d %11.2f%% %10.3f %8d %9.1f %9.1f\n", f.label, con.label, len(ms), 100*none, float64(lost)/n, st.hedges, report.Ms(st.mean), report.Ms(st.p99))
			if fi == 0 && con.agg.Hedge {
				onStopped, onCalls, onLag = none, len(ms), st.lag
			}
		}
		if err := f.off(); err != nil {
			return err
		}
	}
	c := report.AtLeast("with hedging on and replication 2, no partition lost in ≥ 99.9% of calls (2 nodes SIGSTOPped)", onStopped, 0.999,
		fmt.Sprintf("%.2f%% of %d calls", 100*onStopped, onCalls))
	cond, why := bench.Starved("the hedging cell's client", onLag)
	fmt.Fprintf(b.out, "%s\n", c.Doubt(cond, "%s", why).Doubt(onCalls == 0, "no call was measured"))
	return nil
}

// ---- small SVG line charts ----

// svg writes up to two charts if an output directory was given.
func (b *dacBench) svg(name1, title1, xl1, yl1 string, s1 []report.Series, name2, title2, xl2, yl2 string, s2 []report.Series) error {
	if b.outDir == "" {
		return nil
	}
	if err := (report.Chart{Title: title1, XLabel: xl1, YLabel: yl1, Series: s1}).Save(filepath.Join(b.outDir, name1)); err != nil {
		return err
	}
	if name2 == "" {
		return nil
	}
	return report.Chart{Title: title2, XLabel: xl2, YLabel: yl2, Series: s2}.Save(filepath.Join(b.outDir, name2))
}
