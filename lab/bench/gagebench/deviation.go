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

// The deviation section is Gage's Figs 3-5 (§4.2.3) on processes, the
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
// Fig 4 is the footprint: its requests are work.read calls, the spin's
// CPU and then a block of a file of the row's footprint, from the page
// cache or, when it misses, the disk, so that the bottleneck moves from
// the CPU to the disk as the misses pass a share (the simulation's 32 and
// 128 MB rows hardly deviate, 64 MB the most). The misses are real: the
// back ends' cgroups also limit their memory (--deviation-memory), the
// page cache a node fills included, so a node keeps a small file cached
// and not a large one, on that node alone, without touching the
// machine's cache. The gateway charges a miss's bytes read as disk time
// at a disk_bandwidth that makes a miss cost what it does in the
// simulation over a hit, twice; the share of reads that missed is
// measured, the nodes' read_bytes over the blocks asked, beside the
// simulation's assumption. Since a hit's bottleneck is the CPU and a
// miss's the disk, what a subscriber is served is the usage of its
// bottleneck resource over each window (served_gru_by_resource), as the
// simulation measures it: served_gru, each request's own bottleneck
// summed, would count both.

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

// devProfile is Figs 3 and 5's request: a spin of Config.DeviationSpin of
// CPU (on average: each request draws its own).
var devProfile = profile{path: "/spin", service: "work", method: "spin", scale: 1, declared: true,
	body: func(c Config) []byte { return work.Encode(c.DeviationSpin) },
	what: func(c Config) string { return fmt.Sprintf("work.spin computing %v of CPU on average", c.DeviationSpin) }}

// footMissCost is what a read that misses costs over one that hits, the
// simulation's.
var footMissCost = func() float64 { hit, miss := gagesim.FootprintCosts(); return miss / hit }()

// footProfile is Fig 4's request: Config.DeviationSpin of CPU and a
// work.ReadBlock of the smallest footprint (each row sends its own), at
// a disk_bandwidth that makes a block read from the disk cost
// footMissCost times the spin.
func footProfile(c Config) profile {
	return profile{path: "/read", service: "work", method: "read", scale: 1, declared: true,
		diskBW: int(work.ReadBlock / (footMissCost * c.DeviationSpin.Seconds())),
		body:   func(c Config) []byte { return work.EncodeRead(gagesim.Footprints[0].Bytes, c.DeviationSpin) },
		what: func(c Config) string {
			return fmt.Sprintf("work.read computing %v of CPU, then reading a %d KiB block of the footprint's file", c.DeviationSpin, work.ReadBlock>>10)
		}}
}

// devVariant is one row of a figure: the gateway's accounting cycle (0:
// usage per response), the requests' size CV, and Fig 4's footprint
// (Bytes 0 in Figs 3 and 5); judged rows are the ones the figure's goal
// is judged on, as in the simulation.
type devVariant struct {
	fig       int
	label     string
	acct      time.Duration
	cv        float64
	footprint gagesim.Footprint
	judged    bool
}

// devVariants are the rows of figs (of 3, 4, 5), the simulation's.
func devVariants(figs []int) []devVariant {
	var vs []devVariant
	if slices.Contains(figs, 3) {
		judgedAt := gagesim.DefaultConfig().AccountingCycle
		for _, a := range gagesim.AccountingCycles {
			vs = append(vs, devVariant{fig: 3, label: "accounting " + a.String(), acct: a, cv: gagesim.AccountingCV, judged: a == judgedAt})
		}
		vs = append(vs, devVariant{fig: 3, label: "usage per response", cv: gagesim.AccountingCV})
	}
	if slices.Contains(figs, 4) {
		for _, f := range gagesim.Footprints {
			vs = append(vs, devVariant{fig: 4, label: f.Label, footprint: f, judged: true})
		}
	}
	if slices.Contains(figs, 5) {
		for _, cv := range gagesim.SizeCVs {
			vs = append(vs, devVariant{fig: 5, label: gagesim.CVLabel(cv), cv: cv, judged: true})
		}
	}
	return vs
}

// profile is the variant's request.
func (v devVariant) profile(c Config) profile {
	if v.fig == 4 {
		return footProfile(c)
	}
	return devProfile
}

// gateway names the variant's gateway process: one per accounting cycle,
// and Fig 4's, which routes reads and charges disk.
func (v devVariant) gateway() string {
	switch {
	case v.fig == 4:
		return "deviation-footprint"
	case v.acct > 0:
		return "deviation-acct-" + v.acct.String()
	}
	return "deviation-per-response"
}

// request is what the variant's requests send, and what one costs in
// GRU, to turn a demand into a rate: a spin of a size drawn with the
// variant's CV, or a read of its footprint, whose cost is that of the
// mean usage, as gagesim's: the spin's CPU, or the disk of the share the
// simulation assumes to miss, at footMissCost times that, if more.
func (v devVariant) request(c Config) (func(*rand.Rand) []byte, float64) {
	spin := c.DeviationSpin
	gru := spin.Seconds() / gage.DefaultUnit[gage.CPU]
	if v.fig == 4 {
		body := work.EncodeRead(v.footprint.Bytes, spin)
		return func(*rand.Rand) []byte { return body }, gru * max(1, v.footprint.Miss*footMissCost)
	}
	return func(r *rand.Rand) []byte {
		return work.Encode(time.Duration(gagesim.SizeFactor(r, v.cv) * float64(spin)))
	}, gru
}

// devFigs are the figures' titles.
var devFigs = map[int]string{3: "Fig 3: accounting cycle (size CV 50%)", 4: "Fig 4: footprint (share of reads missing the page cache)",
	5: "Fig 5: request size variation (the paper's CVs)"}

// devJudgedOn says which rows a figure is judged on.
var devJudgedOn = map[int]string{3: "accounting_cycle " + gagesim.DefaultConfig().AccountingCycle.String(), 4: "the worst footprint",
	5: "usage per response, the worst CV"}

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
	// miss is the share of Fig 4's reads that missed the page cache
	// (missShare), NaN in Figs 3 and 5.
	miss float64
}

// missShare estimates the share of reads that missed the page cache: the
// bytes the back ends had read from storage over the blocks the requests
// asked (readahead is off for the file, so a miss reads its block and no
// more); NaN if none was served.
func missShare(readBytes int64, requests int64) float64 {
	if requests <= 0 {
		return math.NaN()
	}
	return float64(readBytes) / float64(requests*work.ReadBlock)
}

// meanMiss is the mean miss share of cells, NaN if none was measured.
func meanMiss(cells []devCell) float64 {
	var xs []float64
	for _, c := range cells {
		if !math.IsNaN(c.miss) {
			xs = append(xs, c.miss)
		}
	}
	return meanOrNaN(xs)
}

// footDoubt says why Fig 4's rows are not the experiment, "" if they are:
// the smallest footprint must stay cached (under footMaxHit of its reads
// missing) and the largest must miss (at least footMinMiss), or the
// memory limit did not make the page cache what the rows vary.
func footDoubt(rows []devRow) string {
	var small, large *devRow
	for i := range rows {
		r := &rows[i]
		if r.fig != 4 {
			continue
		}
		if small == nil || r.footprint.Bytes < small.footprint.Bytes {
			small = r
		}
		if large == nil || r.footprint.Bytes > large.footprint.Bytes {
			large = r
		}
	}
	if small == nil {
		return ""
	}
	var why []string
	if m := meanMiss(small.cells); !(m < footMaxHit) {
		why = append(why, fmt.Sprintf("the %s footprint missed %s of its reads (want under %s): the back ends' cache is too small, raise --deviation-memory", small.label, pct(m), pct(footMaxHit)))
	}
	if m := meanMiss(large.cells); !(m >= footMinMiss) {
		why = append(why, fmt.Sprintf("the %s footprint missed %s of its reads (want %s or more): the back ends' cache is too large, lower --deviation-memory", large.label, pct(m), pct(footMinMiss)))
	}
	return strings.Join(why, "; ")
}

// footMaxHit and footMinMiss bound the smallest footprint's misses and
// the largest's (footDoubt): the simulation assumes 0% and 90%, and
// what the figure shows is the bottleneck moving past half.
const footMaxHit, footMinMiss = 0.1, 0.5

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
	e.cfg.MaxWait = backlogWait
	defer func() { e.prof, e.cfg.MaxWait = saved, savedWait }()
	figs := slices.Sorted(slices.Values(e.cfg.DeviationFigures))
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
	memory := 0
	fmt.Fprintf(e.w, "Deviation, Fig %s: %d back-end node processes hosting work, each confined to %.2f cores.\n", joinInts(figs), e.cfg.DeviationBackends, e.cfg.DeviationCPU)
	if slices.Contains(figs, 3) || slices.Contains(figs, 5) {
		fmt.Fprintf(e.w, "  Figs 3 and 5: %s, sizes drawn as the simulation's.\n", devProfile.what(e.cfg))
	}
	if slices.Contains(figs, 4) {
		memory = e.cfg.DeviationMemory
		fp := footProfile(e.cfg)
		fmt.Fprintf(e.w, "  Fig 4: %s; each back end's memory limited to %d MiB, page cache included; disk_bandwidth %d B/s, a miss costing %.3gx a hit, as in the simulation;\n",
			fp.what(e.cfg), memory, fp.diskBW, footMissCost)
	}
	fmt.Fprintf(e.w, "  Four subscribers (%s GRPS, GRU = 10 ms of CPU) each ask %.1fx through a credit gateway of declared capacity %.4g GRPS = the reservations;\n",
		joinRes(subs), gagesim.DeviationDemand, capacity)
	bottleneck := ""
	if slices.Contains(figs, 4) {
		bottleneck = " (Fig 4: per resource, served_gru_by_resource, the bottleneck's usage)"
	}
	fmt.Fprintf(e.w, "  served = the gateway's served_gru (the nodes' measure)%s read every %v; deviation = mean over subscribers and windows of |served/reserved - 1|.\n",
		bottleneck, devPoll)
	fmt.Fprintf(e.w, "  %d rounds x %v per variant after %v of warm-up; requests wait up to %v for their turn.\n", e.cfg.Rounds, cell, e.cfg.Warmup, backlogWait)

	dir := filepath.Join(e.dir, "deviation")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cl := localcluster.New(e.exe, dir)
	defer cl.Close()
	var nodes []*localcluster.Node
	for i := range e.cfg.DeviationBackends {
		nd, err := cl.Start(ctx, localcluster.Spec{ID: fmt.Sprint("d", i), Services: []string{"work:0"}, CPU: e.cfg.DeviationCPU, MemoryMB: memory})
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, nd)
	}
	variants := devVariants(figs)
	gws := map[string]contender{}
	var procs []*proc
	defer func() { stopAll(procs, 5*time.Second) }()
	for _, v := range variants {
		name, extra := v.gateway(), ""
		if _, ok := gws[name]; ok {
			continue
		}
		if v.acct > 0 {
			extra = fmt.Sprintf("accounting_cycle: %v\n", v.acct)
		}
		e.prof = v.profile(e.cfg)
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
		gws[name] = contender{name: name, target: p, gateway: p}
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
			e.prof = v.profile(e.cfg)
			c, err := e.devCell(ctx, gws[v.gateway()], subs, nodes, v, cell, wins, e.cfg.Seed+uint64(r))
			if err != nil {
				return nil, fmt.Errorf("round %d, Fig %d %s: %w", r+1, v.fig, v.label, err)
			}
			rows[i].cells = append(rows[i].cells, c)
			one := rows[i].cells[r : r+1]
			missed := ""
			if v.fig == 4 {
				missed = fmt.Sprintf("; reads missing the cache %s (simulation %s)", pct(c.miss), pct(v.footprint.Miss))
			}
			fmt.Fprintf(e.w, "  [deviation round %d/%d, Fig %d, %s] 1 s %s, 4 s %s; served %.4g GRPS; back ends %.0f-%.0f%% of quota%s; %s\n",
				r+1, e.cfg.Rounds, v.fig, v.label, pct(devMean(one, w1)), pct(devMean(one, w4)), report.Sum(c.served), 100*c.minUtil, 100*c.util, missed, c.machine)
			if c.doubt != "" {
				fmt.Fprintf(e.w, "    cannot be judged: %s\n", c.doubt)
			}
		}
	}
	return e.devReport(figs, subs, rows, wins, w1, w4)
}

// joinInts is "3, 4, 5".
func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
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
	body, perRequest := v.request(e.cfg)
	var flows []flow
	for _, s := range subs {
		flows = append(flows, flow{sub: s.name, host: host(s.name), rate: gagesim.DeviationDemand * s.res / perRequest, body: body})
	}
	io0, err := readsOf(e.hc, gw.gateway, nodes)
	if err != nil {
		return devCell{}, err
	}
	c0, idle0, t0, err := nodesCPU(nodes)
	if err != nil {
		return devCell{}, err
	}
	stop := make(chan struct{})
	polled := make(chan []delivered, 1)
	go func() { polled <- pollServed(e.hc, gw.gateway, subs, t0, stop, v.fig == 4) }()
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
	io1, err := readsOf(e.hc, gw.gateway, nodes)
	if err != nil {
		return devCell{}, err
	}
	window := t1.Sub(t0)
	res := devCell{minUtil: math.Inf(1), miss: math.NaN()}
	if v.fig == 4 {
		res.miss = missShare(io1.bytes-io0.bytes, io1.requests-io0.requests)
	}
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
	for k, s := range subs {
		served := cr.servedGRPS(s.name)
		if v.fig == 4 {
			served = series[k].rate(from, from+cell)
		}
		res.served = append(res.served, served)
	}
	return res, nil
}

// reads are what the back ends had read from storage, and the requests
// the gateway had served, at one time.
type reads struct{ bytes, requests int64 }

// readsOf reads the back ends' read_bytes and gw's requests served.
func readsOf(hc *http.Client, gw *proc, nodes []*localcluster.Node) (reads, error) {
	st, err := gw.status(hc)
	if err != nil {
		return reads{}, fmt.Errorf("gateway status: %w", err)
	}
	var r reads
	for _, s := range st.Subscribers {
		r.requests += s.Served
	}
	for _, nd := range nodes {
		b, err := cpuquota.ReadBytes(nd.PID())
		if err != nil {
			return reads{}, fmt.Errorf("back end %s: %w", nd.Spec.ID, err)
		}
		r.bytes += b
	}
	return r, nil
}

// pollServed reads each subscriber's served GRU at gw every devPoll until
// stop is closed, as series from t0, per resource if byResource (the
// series' amounts are then the bottleneck's). A reading is placed halfway
// through its request; a failed one is skipped (the window it falls in is
// longer).
func pollServed(hc *http.Client, gw *proc, subs []subscriberSpec, t0 time.Time, stop <-chan struct{}, byResource bool) []delivered {
	out := make([]delivered, len(subs))
	tick := time.NewTicker(devPoll)
	defer tick.Stop()
	for {
		sent := time.Now()
		if st, err := gw.status(hc); err == nil {
			at := sent.Add(time.Since(sent) / 2).Sub(t0)
			for k, s := range subs {
				ss := sub(st, s.name)
				out[k].at = append(out[k].at, at)
				out[k].total = append(out[k].total, ss.ServedGRU)
				if byResource {
					var parts [gage.NumResources]float64
					for r := range parts {
						parts[r] = ss.ServedByResource[gage.Resource(r).String()]
					}
					out[k].parts = append(out[k].parts, parts)
				}
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
func (e *env) devReport(figs []int, subs []subscriberSpec, rows []devRow, wins []time.Duration, w1, w4 int) ([]*report.Check, error) {
	csv := report.NewTable("figure", "variant", "accounting_cycle", "size_cv", "footprint_bytes", "round", "subscriber", "reserved_grps", "served_grps", "window_s", "deviation",
		"miss_share", "judgeable")
	var checks []*report.Check
	for _, fig := range figs {
		fmt.Fprintf(e.w, "\n%s, through the gateway (mean deviation over %d rounds)\n", devFigs[fig], e.cfg.Rounds)
		head := []string{"variant"}
		for _, w := range wins {
			head = append(head, w.String())
		}
		head = append(head, "served GRPS", "back ends' quota used")
		if fig == 4 {
			head = append(head, "reads missing", "simulation's")
		}
		t := report.NewTable(head...)
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
			row = append(row, fmt.Sprintf("%.4g", served), fmt.Sprintf("%.0f-%.0f%%", 100*lo, 100*hi))
			if fig == 4 {
				row = append(row, pct(meanMiss(r.cells)), pct(r.footprint.Miss))
			}
			t.Add(row...)
			chart.Series = append(chart.Series, series)
			if r.judged && (worst == nil || devMean(r.cells, w1) > devMean(worst.cells, w1)) {
				worst = r
			}
			for round, c := range r.cells {
				for k, s := range subs {
					for w, win := range wins {
						csv.Addf("%d,%s,%v,%g,%d,%d,%s,%.4g,%.4g,%g,%.5f,%.4f,%t", fig, r.label, r.acct, r.cv, r.footprint.Bytes, round+1, s.name, s.res, c.served[k],
							win.Seconds(), meanOrNaN(c.dev[w][k]), c.miss, c.doubt == "")
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
		c := devVerdict(fig, devJudgedOn[fig], figRows, w1, w4)
		if fig == 4 {
			why := footDoubt(figRows)
			c.Doubt(why != "", "%s", why)
		}
		checks = append(checks, c)
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
	fmt.Fprintf(e.w, "wrote %s/gage-deviation.csv and gage-deviation-fig{%s}.svg\n\n", e.cfg.Out, strings.ReplaceAll(joinInts(figs), " ", ""))
	return checks, nil
}

func meanOrNaN(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return report.Mean(xs)
}

// validateDeviation checks the deviation section's knobs: its figures,
// Fig 4's memory limit; its back ends' quotas must fit the machine beside
// backendReserve cores, and serve the reservations' spins with headroom
// (devMaxLoad), or the back ends, not the gateway, would pace the load.
func (c Config) validateDeviation() error {
	switch {
	case c.DeviationBackends < 1 || c.DeviationCPU <= 0 || c.DeviationSpin <= 0 || c.DeviationScale <= 0:
		return errors.New("gagebench: deviation backends must be >= 1, its cpu, spin and scale > 0")
	case c.Out == "":
		return errors.New("gagebench: deviation needs an output directory")
	case len(c.DeviationFigures) == 0:
		return errors.New("gagebench: deviation figures: none (want of 3, 4, 5)")
	case slices.Contains(c.DeviationFigures, 4) && c.DeviationMemory <= 0:
		return fmt.Errorf("gagebench: deviation memory must be > 0 MiB for Fig 4, got %d", c.DeviationMemory)
	}
	for _, f := range c.DeviationFigures {
		if devFigs[f] == "" {
			return fmt.Errorf("gagebench: deviation figures: no Fig %d (want of 3, 4, 5)", f)
		}
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
