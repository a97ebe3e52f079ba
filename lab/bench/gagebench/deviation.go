package gagebench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune/apps/work"
	"github.com/neptune-cluster/neptune/internal/gage"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/cpuquota"
	"github.com/neptune-cluster/neptune/lab/gagesim"
	"github.com/neptune-cluster/neptune/lab/localcluster"
	"github.com/neptune-cluster/neptune/lab/report"
)

// The deviation section is Gage's Figs 3 and 5 (§4.2.3) on processes, the
// simulation's set-up (gagesim's deviation): four subscribers reserving
// 300:200:150:100 × --deviation-scale GRPS each ask 1.5× their
// reservation through a credit gateway whose declared capacity is the
// reservations, so each should be served exactly its reservation; how far
// the CPU each is served strays from it is printed against the averaging
// window. The requests are work.spin calls whose CPU is drawn with the
// simulation's size distribution, served by back-end node processes
// confined to a CPU quota that can serve more than the reservations: the
// gateway, not the back ends, sets the pace, as in the simulation. What a
// subscriber was served is the gateway's served_gru (what the nodes
// measured: each request's thread CPU), read every devPoll.
//
// Fig 3 varies the gateway's accounting_cycle (usage reported to the
// scheduler once a cycle, the paper's feedback) at size CV 50%, and adds
// usage per response, the gateway's default; Fig 5 runs the paper's four
// size CVs with usage per response.
//
// Fig 4 (footprint: the share of reads missing the page cache) is left
// out: its requests use two resources, CPU and network when the file is
// cached, and the disk as well when it is not, and what the figure shows
// is the bottleneck moving between them as the miss share passes a half
// (the simulation's 32 and 128 MB rows hardly deviate, 64 MB the most).
// On processes a miss has to be a real one, a read the page cache does
// not serve: the work service has no such read, forcing misses needs the
// shared machine's cache dropped (root, and every process's cache), and
// the disk it would measure is the machine's, shared with everything
// else; a stand-in writing and fsyncing for "misses" would reproduce the
// cost mix the simulation already models, not a cache.

// devPoll is how often the section reads each gateway's served GRU.
const devPoll = 20 * time.Millisecond

// devTail is how long the load runs past a cell's measured time, so that
// its last window can end at the poll nearest the cell's end, after it.
const devTail = 5 * devPoll

// devShortest is the shortest window measured: ten polls, so that a late
// poll lengthens a window by a small share of it.
const devShortest = 10 * devPoll

// devSaturated is the share of its quota above which a back end may have
// paced the load instead of the gateway: the cell is not the experiment.
const devSaturated = 0.95

// devMaxLoad is the share of the back ends' quotas the reservations may
// take in spins: the rest is each request's own cost on a node beyond its
// spin, and headroom.
const devMaxLoad = 0.8

// devProfile is the section's request: a spin of Config.DeviationSpin of
// CPU (on average: each request draws its own).
var devProfile = profile{path: "/spin", service: "work", method: "spin", scale: 1, declared: true,
	body: func(c Config) []byte { return work.Encode(c.DeviationSpin) },
	what: func(c Config) string { return fmt.Sprintf("work.spin computing %v of CPU on average", c.DeviationSpin) }}

// devVariant is one row of a figure: the gateway's accounting cycle (0:
// usage per response) and the requests' size CV; judged rows are the ones
// the figure's goal is judged on, as in the simulation.
type devVariant struct {
	fig    int
	label  string
	acct   time.Duration
	cv     float64
	judged bool
}

// devVariants are Fig 3's rows and Fig 5's, the simulation's.
func devVariants() []devVariant {
	var vs []devVariant
	judgedAt := gagesim.DefaultConfig().AccountingCycle
	for _, a := range gagesim.AccountingCycles {
		vs = append(vs, devVariant{fig: 3, label: "accounting " + a.String(), acct: a, cv: gagesim.AccountingCV, judged: a == judgedAt})
	}
	vs = append(vs, devVariant{fig: 3, label: "usage per response", cv: gagesim.AccountingCV})
	for _, cv := range gagesim.SizeCVs {
		vs = append(vs, devVariant{fig: 5, label: gagesim.CVLabel(cv), cv: cv, judged: true})
	}
	return vs
}

// devFigs are the figures' titles.
var devFigs = map[int]string{3: "Fig 3: accounting cycle (size CV 50%)", 5: "Fig 5: request size variation (the paper's CVs)"}

// devCell is one variant's cell in one round.
type devCell struct {
	// dev is, per window width and subscriber, the |deviation| of each
	// of its windows.
	dev [][][]float64
	// served is what each subscriber was served over the cell, in GRPS.
	served []float64
	// util and minUtil are the busiest and the least busy back end's CPU
	// over its quota.
	util, minUtil float64
	// doubt says why the cell cannot be judged, "" if it can; machine
	// is the other work and CPU pressure seen, for the progress line.
	doubt, machine string
}

// devMean is the mean |deviation| at window w over the cells' subscribers
// and windows; NaN if there is no such window.
func devMean(cells []devCell, w int) float64 {
	if w < 0 {
		return math.NaN()
	}
	var xs []float64
	for _, c := range cells {
		for _, s := range c.dev[w] {
			xs = append(xs, s...)
		}
	}
	if len(xs) == 0 {
		return math.NaN()
	}
	return report.Mean(xs)
}

// devRow is a variant's cells, one per round.
type devRow struct {
	devVariant
	cells []devCell
}

// devVerdict judges one figure by the simulation's goal: the worst judged
// row's mean deviation, pooled over rounds, at most DeviationGoal1s at
// 1 s windows (index w1) and DeviationGoal4s at 4 s (w4; -1: the cells
// had none), and every round alone agreeing. A cell that cannot be judged
// leaves it INCONCLUSIVE.
func devVerdict(fig int, judgedOn string, rows []devRow, w1, w4 int) *report.Check {
	worst1, worst4, label1, label4, missing := 0.0, 0.0, "", "", false
	var rounds []bool
	var doubts []string
	for _, r := range rows {
		if !r.judged {
			continue
		}
		d1, d4 := devMean(r.cells, w1), devMean(r.cells, w4)
		missing = missing || math.IsNaN(d1) || math.IsNaN(d4)
		if label1 == "" || d1 > worst1 {
			worst1, label1 = d1, r.label
		}
		if label4 == "" || d4 > worst4 {
			worst4, label4 = d4, r.label
		}
		for i, c := range r.cells {
			ok := devMean(r.cells[i:i+1], w1) <= gagesim.DeviationGoal1s && devMean(r.cells[i:i+1], w4) <= gagesim.DeviationGoal4s
			if i == len(rounds) {
				rounds = append(rounds, true)
			}
			rounds[i] = rounds[i] && ok
			if c.doubt != "" {
				doubts = append(doubts, fmt.Sprintf("round %d, %s: %s", i+1, r.label, c.doubt))
			}
		}
	}
	c := &report.Check{
		Goal: fmt.Sprintf("Fig %d deviation through the gateway (%s): <= %.0f%% at 1 s and <= %.0f%% at 4 s windows", fig, judgedOn,
			100*gagesim.DeviationGoal1s, 100*gagesim.DeviationGoal4s),
		Met:      worst1 <= gagesim.DeviationGoal1s && worst4 <= gagesim.DeviationGoal4s,
		Measured: fmt.Sprintf("worst at 1 s %s (%s), at 4 s %s (%s)", pct(worst1), label1, pct(worst4), label4),
	}
	report.Rounds(c, rounds)
	switch {
	case w4 < 0:
		c.Doubt(true, "no 4 s window in a cell: run cells of at least 4 s (--cell 2s or more)")
	case missing || label1 == "":
		c.Doubt(true, "a judged variant had no window measured")
	}
	return doubtCells(c, doubts)
}

// deviation runs every variant once per round on one cluster of confined
// back ends, each through a gateway of its accounting cycle, and judges
// and plots the pooled rounds.
func (e *env) deviation(ctx context.Context) ([]*report.Check, error) {
	saved, savedWait := e.prof, e.cfg.MaxWait
	e.prof, e.cfg.MaxWait = devProfile, backlogWait
	defer func() { e.prof, e.cfg.MaxWait = saved, savedWait }()
	subs := devSubscribers(e.cfg)
	capacity := 0.0
	for _, s := range subs {
		capacity += s.res
	}
	cell := 2 * e.cfg.Cell
	var wins []time.Duration
	for _, w := range gagesim.DeviationWindows {
		if w >= devShortest && w <= cell {
			wins = append(wins, w)
		}
	}
	w1, w4 := slices.Index(wins, time.Second), slices.Index(wins, 4*time.Second)
	fmt.Fprintf(e.w, "Figs 3 and 5: %d back-end node processes hosting work, each confined to %.2f cores; %s, sizes drawn as the simulation's.\n",
		e.cfg.DeviationBackends, e.cfg.DeviationCPU, e.prof.what(e.cfg))
	fmt.Fprintf(e.w, "  Four subscribers (%s GRPS, GRU = 10 ms of CPU) each ask %.1fx through a credit gateway of declared capacity %.4g GRPS = the reservations;\n",
		joinRes(subs), gagesim.DeviationDemand, capacity)
	fmt.Fprintf(e.w, "  served = the gateway's served_gru (the nodes' measure) read every %v; deviation = mean over subscribers and windows of |served/reserved - 1|.\n", devPoll)
	fmt.Fprintf(e.w, "  %d rounds x %v per variant after %v of warm-up; requests wait up to %v for their turn.\n", e.cfg.Rounds, cell, e.cfg.Warmup, backlogWait)

	dir := filepath.Join(e.dir, "deviation")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cl := localcluster.New(e.exe, dir)
	defer cl.Close()
	var nodes []*localcluster.Node
	for i := range e.cfg.DeviationBackends {
		nd, err := cl.Start(ctx, localcluster.Spec{ID: fmt.Sprint("d", i), Services: []string{"work:0"}, CPU: e.cfg.DeviationCPU})
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, nd)
	}
	variants := devVariants()
	gws := map[time.Duration]contender{}
	var procs []*proc
	defer func() { stopAll(procs, 5*time.Second) }()
	for _, v := range variants {
		if _, ok := gws[v.acct]; ok {
			continue
		}
		name, extra := "deviation-per-response", ""
		if v.acct > 0 {
			name, extra = "deviation-acct-"+v.acct.String(), fmt.Sprintf("accounting_cycle: %v\n", v.acct)
		}
		p, err := startGateway(ctx, e.exe, dir, name, e.gatewayConfigFor(cl.Seeds(), "credit", capacity, subs, extra), cl.SecurityArgs(""), e.cfg.Procs)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		if err := e.waitReady(ctx, p.http, subs); err != nil {
			return nil, err
		}
		if err := everyBackend(ctx, gatewayCall(e.hc, p.http, e.prof.path, subs[0].name), e.prof.body(e.cfg), len(nodes)); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		gws[v.acct] = contender{name: name, target: p, gateway: p}
	}
	if bench.Sleep(ctx, settle); ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rows := make([]devRow, len(variants))
	for i, v := range variants {
		rows[i].devVariant = v
	}
	for r := range e.cfg.Rounds {
		for i, v := range variants {
			c, err := e.devCell(ctx, gws[v.acct], subs, nodes, v, cell, wins, e.cfg.Seed+uint64(r))
			if err != nil {
				return nil, fmt.Errorf("round %d, Fig %d %s: %w", r+1, v.fig, v.label, err)
			}
			rows[i].cells = append(rows[i].cells, c)
			one := rows[i].cells[r : r+1]
			fmt.Fprintf(e.w, "  [deviation round %d/%d, Fig %d, %s] 1 s %s, 4 s %s; served %.4g GRPS; back ends %.0f-%.0f%% of quota; %s\n",
				r+1, e.cfg.Rounds, v.fig, v.label, pct(devMean(one, w1)), pct(devMean(one, w4)), report.Sum(c.served), 100*c.minUtil, 100*c.util, c.machine)
			if c.doubt != "" {
				fmt.Fprintf(e.w, "    cannot be judged: %s\n", c.doubt)
			}
		}
	}
	return e.devReport(subs, rows, wins, w1, w4)
}

// devSubscribers are the simulation's four, scaled.
func devSubscribers(cfg Config) []subscriberSpec {
	var subs []subscriberSpec
	for i, r := range gagesim.DeviationReservations {
		subs = append(subs, subscriberSpec{fmt.Sprintf("s%d", i+1), r * cfg.DeviationScale})
	}
	return subs
}

// devCell runs one variant's cell through gw and measures it: what each
// subscriber was served, polled, and whether the machine let the back
// ends and the load generator run.
func (e *env) devCell(ctx context.Context, gw contender, subs []subscriberSpec, nodes []*localcluster.Node, v devVariant, cell time.Duration,
	wins []time.Duration, seed uint64) (devCell, error) {
	spin := e.cfg.DeviationSpin
	perRequest := spin.Seconds() / gage.DefaultUnit[gage.CPU] // GRU
	var flows []flow
	for _, s := range subs {
		flows = append(flows, flow{sub: s.name, host: host(s.name), rate: gagesim.DeviationDemand * s.res / perRequest,
			body: func(r *rand.Rand) []byte {
				return work.Encode(time.Duration(gagesim.SizeFactor(r, v.cv) * float64(spin)))
			}})
	}
	c0, idle0, t0, err := nodesCPU(nodes)
	if err != nil {
		return devCell{}, err
	}
	stop := make(chan struct{})
	polled := make(chan []delivered, 1)
	go func() { polled <- pollServed(e.hc, gw.gateway, subs, t0, stop) }()
	cr, err := e.runCell(ctx, gw, flows, cell+devTail, seed)
	close(stop)
	series := <-polled
	if err != nil {
		return devCell{}, err
	}
	c1, idle1, t1, err := nodesCPU(nodes)
	if err != nil {
		return devCell{}, err
	}
	window := t1.Sub(t0)
	res := devCell{minUtil: math.Inf(1)}
	var quota []cpuquota.Usage
	for x, nd := range nodes {
		used := c1[x] - c0[x]
		quota = append(quota, cpuquota.Usage{Name: nd.Spec.ID, Cores: e.cfg.DeviationCPU, Used: used})
		util := used.Seconds() / (window.Seconds() * e.cfg.DeviationCPU)
		res.util, res.minUtil = max(res.util, util), min(res.minUtil, util)
	}
	j := cpuquota.Judge(window, runtime.NumCPU(), idle1-idle0, quota)
	if len(j.Over) > 0 {
		return devCell{}, fmt.Errorf("the CPU quota did not hold: %s", j.Reason)
	}
	var why report.Check
	why.Doubt(j.Starved, "%s", j.Reason)
	cr.starve.Doubt(&why, "the cell")
	late, lateWhy := bench.Starved("the load generator (arrivals' mean lateness)", cr.late)
	why.Doubt(late, "%s", lateWhy)
	why.Doubt(res.util >= devSaturated, "the busiest back end used %.0f%% of its quota: the back ends, not the gateway, may have paced the load", 100*res.util)
	res.doubt, res.machine = strings.Join(why.Doubts, "; "), cr.starve.String()
	from := cr.from.Sub(t0)
	res.dev = make([][][]float64, len(wins))
	for w, win := range wins {
		for k, s := range subs {
			res.dev[w] = append(res.dev[w], series[k].deviations(from, from+cell+devTail, win, s.res))
		}
	}
	for _, s := range subs {
		res.served = append(res.served, cr.servedGRPS(s.name))
	}
	return res, nil
}

// pollServed reads each subscriber's served GRU at gw every devPoll until
// stop is closed, as series from t0. A reading is placed halfway through
// its request; a failed one is skipped (the window it falls in is longer).
func pollServed(hc *http.Client, gw *proc, subs []subscriberSpec, t0 time.Time, stop <-chan struct{}) []delivered {
	out := make([]delivered, len(subs))
	tick := time.NewTicker(devPoll)
	defer tick.Stop()
	for {
		sent := time.Now()
		if st, err := gw.status(hc); err == nil {
			at := sent.Add(time.Since(sent) / 2).Sub(t0)
			for k, s := range subs {
				out[k].at = append(out[k].at, at)
				out[k].total = append(out[k].total, sub(st, s.name).ServedGRU)
			}
		}
		select {
		case <-stop:
			return out
		case <-tick.C:
		}
	}
}

// devReport prints each figure's rows against the window, the worst
// judged row per subscriber, writes the CSV and the charts, and judges.
func (e *env) devReport(subs []subscriberSpec, rows []devRow, wins []time.Duration, w1, w4 int) ([]*report.Check, error) {
	csv := report.NewTable("figure", "variant", "accounting_cycle", "size_cv", "round", "subscriber", "reserved_grps", "served_grps", "window_s", "deviation", "judgeable")
	var checks []*report.Check
	for _, fig := range []int{3, 5} {
		fmt.Fprintf(e.w, "\n%s, through the gateway (mean deviation over %d rounds)\n", devFigs[fig], e.cfg.Rounds)
		head := []string{"variant"}
		for _, w := range wins {
			head = append(head, w.String())
		}
		t := report.NewTable(append(head, "served GRPS", "back ends' quota used")...)
		chart := report.Chart{Title: devFigs[fig] + ", gateway and node processes", XLabel: "averaging window (s)", YLabel: "deviation from reservation (%)", LogX: true}
		var figRows []devRow
		var worst *devRow
		for i := range rows {
			r := &rows[i]
			if r.fig != fig {
				continue
			}
			figRows = append(figRows, *r)
			row := []string{r.label}
			series := report.Series{Name: r.label}
			for w, win := range wins {
				d := devMean(r.cells, w)
				row = append(row, pct(d))
				series.Add(win.Seconds(), 100*d)
			}
			served, lo, hi := 0.0, math.Inf(1), 0.0
			for _, c := range r.cells {
				served += report.Sum(c.served) / float64(len(r.cells))
				lo, hi = min(lo, c.minUtil), max(hi, c.util)
			}
			t.Add(append(row, fmt.Sprintf("%.4g", served), fmt.Sprintf("%.0f-%.0f%%", 100*lo, 100*hi))...)
			chart.Series = append(chart.Series, series)
			if r.judged && (worst == nil || devMean(r.cells, w1) > devMean(worst.cells, w1)) {
				worst = r
			}
			for round, c := range r.cells {
				for k, s := range subs {
					for w, win := range wins {
						csv.Addf("%d,%s,%v,%g,%d,%s,%.4g,%.4g,%g,%.5f,%t", fig, r.label, r.acct, r.cv, round+1, s.name, s.res, c.served[k], win.Seconds(),
							meanOrNaN(c.dev[w][k]), c.doubt == "")
					}
				}
			}
		}
		t.Print(e.w)
		if fig == 3 {
			fmt.Fprintln(e.w, "(paper: < 8% at >= 4 s with accounting cycles <= 500 ms; 114% at 1 s with a 2 s cycle)")
		}
		if worst != nil && w1 >= 0 {
			fmt.Fprintf(e.w, "per subscriber, %s (the worst judged at 1 s):\n", worst.label)
			st := report.NewTable("subscriber", "reserved", "served", "deviation 1 s", "4 s")
			for k, s := range subs {
				var served float64
				var d1, d4 []float64
				for _, c := range worst.cells {
					served += c.served[k] / float64(len(worst.cells))
					d1 = append(d1, c.dev[w1][k]...)
					if w4 >= 0 {
						d4 = append(d4, c.dev[w4][k]...)
					}
				}
				st.Add(s.name, fmt.Sprintf("%.4g", s.res), fmt.Sprintf("%.4g", served), pct(meanOrNaN(d1)), pct(meanOrNaN(d4)))
			}
			st.Print(e.w)
		}
		judgedOn := "usage per response, the worst CV"
		if fig == 3 {
			judgedOn = "accounting_cycle " + gagesim.DefaultConfig().AccountingCycle.String()
		}
		checks = append(checks, devVerdict(fig, judgedOn, figRows, w1, w4))
		if err := os.MkdirAll(e.cfg.Out, 0o755); err != nil {
			return nil, err
		}
		if err := chart.Save(filepath.Join(e.cfg.Out, fmt.Sprintf("gage-deviation-fig%d.svg", fig))); err != nil {
			return nil, err
		}
	}
	if err := csv.Save(filepath.Join(e.cfg.Out, "gage-deviation.csv")); err != nil {
		return nil, err
	}
	fmt.Fprintf(e.w, "wrote %s/gage-deviation.csv and gage-deviation-fig{3,5}.svg\n\n", e.cfg.Out)
	return checks, nil
}

func meanOrNaN(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return report.Mean(xs)
}

// validateDeviation checks the deviation section's knobs: its back ends'
// quotas must fit the machine beside backendReserve cores, and serve the
// reservations' spins with headroom (devMaxLoad), or the back ends, not
// the gateway, would pace the load.
func (c Config) validateDeviation() error {
	switch {
	case c.DeviationBackends < 1 || c.DeviationCPU <= 0 || c.DeviationSpin <= 0 || c.DeviationScale <= 0:
		return errors.New("gagebench: deviation backends must be >= 1, its cpu, spin and scale > 0")
	case c.Out == "":
		return errors.New("gagebench: deviation needs an output directory")
	}
	if err := cpuquota.Fits(slices.Repeat([]float64{c.DeviationCPU}, c.DeviationBackends), backendReserve); err != nil {
		return fmt.Errorf("gagebench: deviation: %w", err)
	}
	reserved := 0.0
	for _, s := range devSubscribers(c) {
		reserved += s.res * gage.DefaultUnit[gage.CPU] // cores of spin
	}
	if quota := float64(c.DeviationBackends) * c.DeviationCPU; reserved > devMaxLoad*quota {
		return fmt.Errorf("gagebench: deviation: the reservations spin %.3g cores, over %.0f%% of the back ends' %.3g: lower --deviation-scale or raise --deviation-cpu or --deviation-backends",
			reserved, 100*devMaxLoad, quota)
	}
	return nil
}
