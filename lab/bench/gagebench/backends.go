package gagebench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/work"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/cpuquota"
	"github.com/neptune-cluster/neptune/lab/localcluster"
	"github.com/neptune-cluster/neptune/lab/report"
)

// The backends section is Gage's Figs 7 and 8 and Tables 3–4 (§4.3–4.4)
// on back-end node processes each confined to a CPU quota, so that a back
// end is CPU-bound as the paper's RPNs were and eight of them fit in two
// cores beside the gateway and the load generator: throughput against the
// number of back ends through a credit gateway and from a direct Neptune
// client, the gateway's CPU against its throughput, and the back ends one
// gateway core could serve.

// Goals of the backends section, fixed before the run.
const (
	// backendScaleGoal: through the gateway, the most back ends serve at
	// least this share of the proportional multiple of the fewest's
	// throughput (1 → 8: 5.6×; the paper: "the throughput grows linearly
	// with the number of RPNs").
	backendScaleGoal = 0.7
	// backendPenaltyGoal: at every count of back ends the gateway serves
	// at least this multiple of the direct client (the paper: 540 against
	// 550.5 requests/s per RPN, a 1.8% penalty).
	backendPenaltyGoal = 0.95
)

// backendReserve is the CPU left beside the confined back ends for the
// gateway, the load generator (this process) and the rest of the machine.
const backendReserve = 0.5

// minNodeUtil is the share of its quota the busiest back end of a cell
// must use for the cell to count as node-bound.
const minNodeUtil = 0.8

// The paper's figures, printed beside ours.
const (
	paperPerRPN, paperPerRPNWithout = 540.0, 550.5 // requests/s per RPN (Fig 7)
	paperPenalty                    = 1.8          // %, as the paper rounds it
	paperPerRequestUS               = 124.0        // µs of overhead per 6 KB request (Tables 3–4)
	paperRPNCostUS                  = 56.7         // µs of it on the RPN
	paperRPNs                       = 24           // RPNs one RDN could serve (Fig 8)
)

// The two contenders, in the order of a cell's pair.
const (
	viaGateway = iota
	direct
)

var backendContenders = [2]string{"gateway", "direct"}

// backendProfile is the section's request: a spin of Config.BackendSpin
// of CPU, routed by the gateway as the cpu profile's.
var backendProfile = profile{path: "/spin", service: "work", method: "spin", scale: 1, declared: true,
	body: func(c Config) []byte { return work.Encode(c.BackendSpin) },
	what: func(c Config) string { return fmt.Sprintf("work.spin computing %v", c.BackendSpin) }}

// beCell is one contender's cell at one count of back ends in one round:
// its throughput, how busy it kept the back ends, what it cost.
type beCell struct {
	rate float64 // requests answered per second
	// starved says why the machine may have denied a back end its quota
	// or the load generator the CPU (cpuquota's judgment, the lag probe),
	// "" if neither.
	starved string
	// util and minUtil are the busiest and the least busy back end's CPU
	// over its quota.
	util, minUtil float64
	reqs          int
	secs          float64
	// gwCPU is the gateway process's CPU (gateway cells); nodeCPU all the
	// back ends'.
	gwCPU, nodeCPU time.Duration
}

// nodeBound is whether the busiest back end used nearly all its quota:
// otherwise something before the back ends set the cell's rate.
func (c beCell) nodeBound() bool { return c.util >= minNodeUtil }

// beRound is one round at one count of back ends: the cells of the two
// contenders (viaGateway, direct).
type beRound [2]beCell

// backends runs every count of back ends once per round, rounds times,
// each on a fresh cluster, and judges and plots the pooled rounds.
func (e *env) backends(ctx context.Context) ([]*report.Check, error) {
	saved := e.prof
	e.prof = backendProfile
	defer func() { e.prof = saved }()
	counts := backendCounts(e.cfg.Backends)
	fmt.Fprintf(e.w, "Figs 7-8: %v back-end node processes hosting work, each confined to %.2f cores; %s per request, %d closed-loop callers per back end;\n",
		counts, e.cfg.BackendCPU, e.prof.what(e.cfg), e.cfg.BackendCallers)
	fmt.Fprintf(e.w, "  through a credit gateway (one subscriber reserving far above the load, capacity declared far above) against a direct Neptune client;\n")
	fmt.Fprintf(e.w, "  %v per contender per round in %d slices each, alternated ABBA, after %v of warm-up split between them; %d rounds.\n",
		e.cfg.Cell, overheadSlices, e.cfg.Warmup, e.cfg.Rounds)
	res := map[int][]beRound{}
	csv := report.NewTable("round", "backends", "contender", "req_per_s", "busiest_util", "least_util", "gateway_cores", "gateway_us_per_req", "backend_us_per_req", "starved")
	for r := range e.cfg.Rounds {
		for _, n := range counts {
			fmt.Fprintf(e.w, "  [backends round %d/%d, %s] starting\n", r+1, e.cfg.Rounds, backEnds(n))
			br, err := e.backendRound(ctx, r, n)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", r+1, backEnds(n), err)
			}
			res[n] = append(res[n], br)
			g, d := br[viaGateway], br[direct]
			fmt.Fprintf(e.w, "  [backends round %d/%d, %s] gateway %.1f req/s (back ends %.0f-%.0f%% of quota; gateway %.3f cores, %.0f µs/request), direct %.1f req/s (%.0f-%.0f%%); gateway/direct %.3f\n",
				r+1, e.cfg.Rounds, backEnds(n), g.rate, 100*g.minUtil, 100*g.util, cores(g.gwCPU, g.secs), perRequestUS(g.gwCPU, g.reqs), d.rate, 100*d.minUtil, 100*d.util, ratio(g.rate, d.rate))
			for k, c := range br {
				if c.starved != "" {
					fmt.Fprintf(e.w, "    %s cell starved: %s\n", backendContenders[k], c.starved)
				} else if !c.nodeBound() {
					fmt.Fprintf(e.w, "    %s cell not node-bound: the busiest back end used %.0f%% of its quota\n", backendContenders[k], 100*c.util)
				}
				gwCores, gwPer := "-", "-"
				if k == viaGateway {
					gwCores, gwPer = fmt.Sprintf("%.4f", cores(c.gwCPU, c.secs)), fmt.Sprintf("%.1f", perRequestUS(c.gwCPU, c.reqs))
				}
				csv.Addf("%d,%d,%s,%.2f,%.3f,%.3f,%s,%s,%.1f,%t", r+1, n, backendContenders[k], c.rate, c.util, c.minUtil, gwCores,
					gwPer, perRequestUS(c.nodeCPU, c.reqs), c.starved != "")
			}
		}
	}
	checks := e.backendReport(counts, res)
	if err := os.MkdirAll(e.cfg.Out, 0o755); err != nil {
		return nil, err
	}
	if err := csv.Save(filepath.Join(e.cfg.Out, "gage-backends.csv")); err != nil {
		return nil, err
	}
	if err := backendCharts(e.cfg, counts, res); err != nil {
		return nil, err
	}
	fmt.Fprintf(e.w, "wrote %s/gage-backends.{csv,svg} and gage-backends-cpu.svg\n\n", e.cfg.Out)
	return checks, nil
}

// backEnds is "1 back end", "2 back ends".
func backEnds(n int) string {
	if n == 1 {
		return "1 back end"
	}
	return fmt.Sprintf("%d back ends", n)
}

// backendCounts are the counts of back ends in ascending order, once each.
func backendCounts(ns []int) []int { return slices.Compact(slices.Sorted(slices.Values(ns))) }

// backendRound starts n confined back ends and a gateway in front of
// them, and measures the two contenders side by side.
func (e *env) backendRound(ctx context.Context, r, n int) (beRound, error) {
	var br beRound
	dir := filepath.Join(e.dir, fmt.Sprintf("backends-r%d-n%d", r, n))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return br, err
	}
	cl := localcluster.New(e.exe, dir)
	defer cl.Close()
	var nodes []*localcluster.Node
	for i := range n {
		nd, err := cl.Start(ctx, localcluster.Spec{ID: fmt.Sprint("b", i), Services: []string{"work:0"}, CPU: e.cfg.BackendCPU})
		if err != nil {
			return br, err
		}
		nodes = append(nodes, nd)
	}
	// Far above anything n back ends could serve: the gateway is never
	// the one that paces the load.
	const reservation, capacity = 1e5, 1e6
	subs := []subscriberSpec{{"site1", reservation}}
	gw, err := startGateway(ctx, e.exe, dir, "gateway", e.gatewayConfigFor(cl.Seeds(), "credit", capacity, subs, ""), cl.SecurityArgs(""), e.cfg.Procs)
	if err != nil {
		return br, err
	}
	defer stopAll([]*proc{gw}, 5*time.Second)
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: cl.Seeds(), Security: cl.ClientSecurity("client/client")})
	if err != nil {
		return br, err
	}
	defer c.Close()
	calls := [2]func(context.Context, []byte) ([]byte, error){
		viaGateway: gatewayCall(e.hc, gw.http, e.prof.path, "site1"),
		direct: func(ctx context.Context, body []byte) ([]byte, error) {
			resp, err := c.Call(ctx, e.prof.service, 0, e.prof.method, body)
			if err != nil {
				return nil, err
			}
			return resp.Body, nil
		},
	}
	body := e.prof.body(e.cfg)
	for k, call := range calls {
		if err := everyBackend(ctx, call, body, n); err != nil {
			return br, fmt.Errorf("%s: %w", backendContenders[k], err)
		}
	}
	conc := e.cfg.BackendCallers * n
	for k, call := range calls {
		var warm bench.Cell
		if err := bench.RunCell(ctx, drop(call), body, conc, e.cfg.Warmup/2, &warm); err != nil {
			return br, fmt.Errorf("%s warm-up: %w", backendContenders[k], err)
		}
	}
	// As in the overhead section, each contender's cell is cut in slices
	// run ABBA (BAAB in odd rounds), so that drift in the machine's speed
	// within a round falls on both alike.
	pair := [2]int{viaGateway, direct}
	if r%2 == 1 {
		pair[0], pair[1] = pair[1], pair[0]
	}
	// Each back end's CPU is read around every slice, for each
	// contender's utilisation, and over the whole round, whose one long
	// window judges the quota: a slice's few hundred ms are too few of
	// /proc's 10 ms ticks to tell 5% over it.
	var (
		cells  [2]bench.Cell
		used   [2][]time.Duration // per back end
		secs   [2]float64
		idle   [2]time.Duration // the machine's
		gwCPU  time.Duration
		probes [2]bench.Starvation
	)
	for k := range used {
		used[k] = make([]time.Duration, n)
		probes[k] = bench.Starvation{Pressure: -1, Others: -1}
	}
	round0, idle0, t0, err := nodesCPU(nodes)
	if err != nil {
		return br, err
	}
	slice := e.cfg.Cell / overheadSlices
	for i := range 2 * overheadSlices {
		k := pair[(i+i/2)%2] // 0 1 1 0 0 1 1 0 ...
		probe := bench.StartLagProbe(5 * time.Millisecond)
		g0, _ := cpuquota.ProcessCPU(gw.cmd.Process.Pid)
		c0, i0, s0, err := nodesCPU(nodes)
		if err != nil {
			return br, err
		}
		if err := bench.RunCell(ctx, drop(calls[k]), body, conc, slice, &cells[k]); err != nil {
			return br, fmt.Errorf("%s: %w", backendContenders[k], err)
		}
		c1, i1, s1, err := nodesCPU(nodes)
		if err != nil {
			return br, err
		}
		if k == viaGateway {
			g1, _ := cpuquota.ProcessCPU(gw.cmd.Process.Pid)
			gwCPU += g1 - g0
		}
		probes[k] = probes[k].Worse(probe.Stop())
		secs[k] += s1.Sub(s0).Seconds()
		idle[k] += i1 - i0
		for x := range c1 {
			used[k][x] += c1[x] - c0[x]
		}
	}
	round1, idle1, t1, err := nodesCPU(nodes)
	if err != nil {
		return br, err
	}
	var quota []cpuquota.Usage
	for x, nd := range nodes {
		quota = append(quota, cpuquota.Usage{Name: nd.Spec.ID, Cores: e.cfg.BackendCPU, Used: round1[x] - round0[x]})
	}
	if j := cpuquota.Judge(t1.Sub(t0), runtime.NumCPU(), idle1-idle0, quota); len(j.Over) > 0 {
		return br, fmt.Errorf("the CPU quota did not hold: %s", j.Reason)
	}
	for k := range br {
		c := beCell{rate: cells[k].Rate(), reqs: cells[k].Latency().N, secs: secs[k], minUtil: math.Inf(1)}
		for _, u := range used[k] {
			util := u.Seconds() / (secs[k] * e.cfg.BackendCPU)
			c.util, c.minUtil = max(c.util, util), min(c.minUtil, util)
			c.nodeCPU += u
		}
		var why report.Check
		// The machine's idle time over the contender's slices: with none,
		// a back end may have been denied its quota.
		j := cpuquota.Judge(time.Duration(secs[k]*float64(time.Second)), runtime.NumCPU(), idle[k], nil)
		why.Doubt(j.Starved, "%s", j.Reason)
		probes[k].Doubt(&why, "the "+backendContenders[k]+" cell")
		c.starved = strings.Join(why.Doubts, "; ")
		if k == viaGateway {
			c.gwCPU = gwCPU
		}
		br[k] = c
	}
	return br, nil
}

// gatewayCall is a call of sub's through the gateway at target: the
// answer's body, an error unless it is 200.
func gatewayCall(hc *http.Client, target, path, sub string) func(context.Context, []byte) ([]byte, error) {
	return func(ctx context.Context, body []byte) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, "POST", "http://"+target+path, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Host = host(sub)
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("gateway: status %d: %s", resp.StatusCode, b)
		}
		return b, err
	}
}

// nodesCPU reads each node process's CPU so far, the machine's idle time
// and the clock.
func nodesCPU(nodes []*localcluster.Node) ([]time.Duration, time.Duration, time.Time, error) {
	cpu := make([]time.Duration, len(nodes))
	for i, nd := range nodes {
		c, err := cpuquota.ProcessCPU(nd.PID())
		if err != nil {
			return nil, 0, time.Time{}, fmt.Errorf("back end %s: %w", nd.Spec.ID, err)
		}
		cpu[i] = c
	}
	idle, err := cpuquota.MachineIdle()
	return cpu, idle, time.Now(), err
}

// drop is call for bench.RunCell, which needs no answer.
func drop(call func(context.Context, []byte) ([]byte, error)) func(context.Context, []byte) error {
	return func(ctx context.Context, body []byte) error {
		_, err := call(ctx, body)
		return err
	}
}

// everyBackend calls until each of the n back ends has answered (work's
// answer names its process): until then the caller's view of the
// membership is incomplete and a cell would measure fewer back ends.
func everyBackend(ctx context.Context, call func(context.Context, []byte) ([]byte, error), body []byte, n int) error {
	var mu sync.Mutex
	seen := map[int]bool{}
	return localcluster.Wait(ctx, 30*time.Second, func(ctx context.Context) error {
		var wg sync.WaitGroup
		var errs []error
		for range 2 * n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				b, err := call(cctx, body)
				var pid int
				if err == nil {
					pid, err = work.PID(b)
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				seen[pid] = true
			}()
		}
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(seen) < n {
			return fmt.Errorf("only %d of %d back ends answered: %w", len(seen), n, errors.Join(errs...))
		}
		return nil
	})
}

// backendReport prints the pooled figures beside the paper's and returns
// the verdicts.
func (e *env) backendReport(counts []int, res map[int][]beRound) []*report.Check {
	fmt.Fprintf(e.w, "Fig 7: throughput (req/s, mean ± sd over %d rounds) against back ends of %.2f cores; Fig 8: the gateway's CPU against its throughput.\n", e.cfg.Rounds, e.cfg.BackendCPU)
	t := report.NewTable("back ends", "gateway req/s", "direct req/s", "gateway/direct", "per back end (gw)", "gateway cores", "gateway CPU/req", "back-end CPU/req gw", "direct", "busiest-least util gw", "direct")
	var xs, ys []float64 // Fig 8's points: throughput, gateway cores
	for _, n := range counts {
		rs := res[n]
		g, d := rates(rs, viaGateway), rates(rs, direct)
		mg, sg := report.MeanSD(g)
		md, sd := report.MeanSD(d)
		p := pool(rs, viaGateway)
		q := pool(rs, direct)
		xs, ys = append(xs, p.rate), append(ys, cores(p.gwCPU, p.secs))
		t.Add(fmt.Sprint(n), fmt.Sprintf("%.1f ± %.1f", mg, sg), fmt.Sprintf("%.1f ± %.1f", md, sd), fmt.Sprintf("%.3f", ratio(mg, md)),
			fmt.Sprintf("%.1f", mg/float64(n)), fmt.Sprintf("%.3f", cores(p.gwCPU, p.secs)), fmt.Sprintf("%.0f µs", perRequestUS(p.gwCPU, p.reqs)),
			fmt.Sprintf("%.0f µs", perRequestUS(p.nodeCPU, p.reqs)), fmt.Sprintf("%.0f µs", perRequestUS(q.nodeCPU, q.reqs)),
			fmt.Sprintf("%.0f-%.0f%%", 100*p.minUtil, 100*p.util), fmt.Sprintf("%.0f-%.0f%%", 100*q.minUtil, 100*q.util))
	}
	t.Print(e.w)
	top := counts[len(counts)-1]
	p, q := pool(res[top], viaGateway), pool(res[top], direct)
	perGW, perDirect := p.rate/float64(top), q.rate/float64(top)
	fmt.Fprintf(e.w, "Fig 7 at %s: %.1f req/s per back end through the gateway, %.1f direct: a penalty of %.1f%% (paper: %.0f against %.1f per RPN, %.1f%%).\n",
		backEnds(top), perGW, perDirect, 100*(1-ratio(perGW, perDirect)), paperPerRPN, paperPerRPNWithout, paperPenalty)
	slope, icpt := fitLine(xs, ys)
	perReq := p.gwCPU.Seconds() / float64(max(p.reqs, 1))
	fmt.Fprintf(e.w, "Fig 8: gateway cores = %.3f + (%.1f µs) × req/s (least squares over the counts of back ends).\n", icpt, 1e6*slope)
	fmt.Fprintf(e.w, "Tables 3-4: the gateway spends %.0f µs of CPU per request at %s (paper: about %.0f µs in all per 6 KB request);\n", 1e6*perReq, backEnds(top), paperPerRequestUS)
	addedUS := perRequestUS(p.nodeCPU, p.reqs) - perRequestUS(q.nodeCPU, q.reqs)
	fmt.Fprintf(e.w, "  a back end spends %+.0f µs more per request through the gateway than direct, %.1f%% of its CPU per request (paper: %.1f µs on an RPN, under 3.06%% of its CPU).\n",
		addedUS, 100*addedUS/perRequestUS(p.nodeCPU, p.reqs), paperRPNCostUS)
	if perReq > 0 && perGW > 0 {
		per := 1 / perReq / perGW
		fmt.Fprintf(e.w, "Projection: one gateway core serves %.0f req/s, %.0f back ends of %.2f cores at %.1f req/s each (%.1f back ends of a whole core) (paper: about %d RPNs per RDN).\n",
			1/perReq, per, e.cfg.BackendCPU, perGW, per*e.cfg.BackendCPU, paperRPNs)
		if slope > 0 {
			fmt.Fprintf(e.w, "  by the fit's marginal cost (%.0f µs/request, the idle %.3f cores apart): %.0f back ends.\n", 1e6*slope, icpt, (1-icpt)/slope/perGW)
		}
	}
	fmt.Fprintln(e.w)
	checks := []*report.Check{scaleVerdict(counts[0], top, res[counts[0]], res[top])}
	for _, n := range counts {
		checks = append(checks, penaltyVerdict(n, res[n]))
	}
	return checks
}

// rates are contender k's throughputs, one per round.
func rates(rs []beRound, k int) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = r[k].rate
	}
	return out
}

// pool adds up contender k's cells over the rounds: the mean rate, the
// summed costs, the worst utilisation bounds.
func pool(rs []beRound, k int) beCell {
	p := beCell{minUtil: math.Inf(1)}
	for _, r := range rs {
		c := r[k]
		p.reqs += c.reqs
		p.secs += c.secs
		p.gwCPU += c.gwCPU
		p.nodeCPU += c.nodeCPU
		p.util, p.minUtil = max(p.util, c.util), min(p.minUtil, c.minUtil)
	}
	p.rate = report.Mean(rates(rs, k))
	return p
}

// cores is cpu over secs seconds.
func cores(cpu time.Duration, secs float64) float64 {
	if secs <= 0 {
		return math.NaN()
	}
	return cpu.Seconds() / secs
}

// perRequestUS is cpu per request in µs.
func perRequestUS(cpu time.Duration, reqs int) float64 {
	if reqs == 0 {
		return math.NaN()
	}
	return float64(cpu) / float64(time.Microsecond) / float64(reqs)
}

// fitLine is the least-squares line y = icpt + slope·x.
func fitLine(xs, ys []float64) (slope, icpt float64) {
	mx, my := report.Mean(xs), report.Mean(ys)
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return math.NaN(), math.NaN()
	}
	slope = sxy / sxx
	return slope, my - slope*mx
}

// scaleVerdict judges Fig 7's goal: through the gateway, throughput at hi
// back ends at least backendScaleGoal of proportional to lo, pooled and
// in every round. The ratio's denominator must be node-bound (a gateway
// cell at lo that left the back ends idle would inflate it), and the
// direct client must have driven both counts' back ends to their quota,
// which shows the load generator could; the gateway's own cell at hi
// need not be: falling short there is what the goal measures. A starved
// cell, rounds that disagree or a single round leave it INCONCLUSIVE.
func scaleVerdict(lo, hi int, small, large []beRound) *report.Check {
	goal := backendScaleGoal * float64(hi) / float64(lo)
	ms, ml := report.Mean(rates(small, viaGateway)), report.Mean(rates(large, viaGateway))
	var ok []bool
	for i := range min(len(small), len(large)) {
		ok = append(ok, small[i][viaGateway].rate > 0 && large[i][viaGateway].rate/small[i][viaGateway].rate >= goal)
	}
	c := report.AtLeast(fmt.Sprintf("Fig 7: through the gateway, %d → %s ≥ %.2f× (%.0f%% of proportional)", lo, backEnds(hi), goal, 100*backendScaleGoal),
		ratio(ml, ms), goal, fmt.Sprintf("%.2f× (%.1f against %.1f req/s)", ratio(ml, ms), ml, ms))
	report.Rounds(c, ok)
	c.Doubt(lo == hi, "one count of back ends: nothing to scale; run at least two (--backends)")
	var doubts []string
	for i, r := range small {
		doubts = append(doubts, cellDoubts(r, i, lo, true)...)
	}
	for i, r := range large {
		doubts = append(doubts, cellDoubts(r, i, hi, false)...)
	}
	return doubtCells(c, doubts)
}

// penaltyVerdict judges Fig 7's other reading at n back ends: the
// gateway's throughput at least backendPenaltyGoal of the direct client's,
// pooled and in every round; the direct cells must be node-bound.
func penaltyVerdict(n int, rs []beRound) *report.Check {
	mg, md := report.Mean(rates(rs, viaGateway)), report.Mean(rates(rs, direct))
	var ok []bool
	each := make([]string, len(rs))
	var doubts []string
	for i, r := range rs {
		x := ratio(r[viaGateway].rate, r[direct].rate)
		ok = append(ok, x >= backendPenaltyGoal)
		each[i] = fmt.Sprintf("%.3f", x)
		doubts = append(doubts, cellDoubts(r, i, n, false)...)
	}
	c := report.AtLeast(fmt.Sprintf("Fig 7: at %s, gateway throughput ≥ %.2f× direct", backEnds(n), backendPenaltyGoal),
		ratio(mg, md), backendPenaltyGoal, fmt.Sprintf("%.3f× (%.1f against %.1f req/s; rounds: %s)", ratio(mg, md), mg, md, strings.Join(each, ", ")))
	report.Rounds(c, ok)
	return doubtCells(c, doubts)
}

// cellDoubts are why round i's cells at n back ends cannot be judged:
// either starved, the direct cell not node-bound, and with gatewayBound
// the gateway cell not node-bound either.
func cellDoubts(r beRound, i, n int, gatewayBound bool) []string {
	var out []string
	for k, c := range r {
		at := fmt.Sprintf("round %d, %s, %s", i+1, backEnds(n), backendContenders[k])
		switch {
		case c.starved != "":
			out = append(out, at+": "+c.starved)
		case !c.nodeBound() && (k == direct || gatewayBound):
			out = append(out, fmt.Sprintf("%s: not node-bound (the busiest back end used %.0f%% of its quota)", at, 100*c.util))
		}
	}
	return out
}

// doubtCells adds one doubt for the cells that cannot be judged, naming
// how many and the first.
func doubtCells(c *report.Check, doubts []string) *report.Check {
	if len(doubts) == 0 {
		return c
	}
	return c.Doubt(true, "%d cells cannot be judged (first: %s)", len(doubts), doubts[0])
}

// backendCharts draws Fig 7 (throughput against back ends, both
// contenders and proportional to the fewest) and Fig 8 (the gateway's
// cores against its throughput).
func backendCharts(cfg Config, counts []int, res map[int][]beRound) error {
	gw, dr, ideal := report.Series{Name: "through the gateway"}, report.Series{Name: "direct client"}, report.Series{Name: "proportional to the fewest (gateway)"}
	cpu := report.Series{Name: "gateway process"}
	base := report.Mean(rates(res[counts[0]], viaGateway)) / float64(counts[0])
	for _, n := range counts {
		p := pool(res[n], viaGateway)
		gw.Add(float64(n), p.rate)
		dr.Add(float64(n), report.Mean(rates(res[n], direct)))
		ideal.Add(float64(n), base*float64(n))
		cpu.Add(p.rate, cores(p.gwCPU, p.secs))
	}
	err := report.Chart{Title: fmt.Sprintf("Fig 7: throughput vs back ends of %.2f cores (mean of %d rounds)", cfg.BackendCPU, cfg.Rounds),
		XLabel: "back ends", YLabel: "requests/s", Series: []report.Series{gw, dr, ideal}}.Save(filepath.Join(cfg.Out, "gage-backends.svg"))
	if err != nil {
		return err
	}
	return report.Chart{Title: "Fig 8: the gateway's CPU vs its throughput", XLabel: "requests/s", YLabel: "cores", Series: []report.Series{cpu}}.
		Save(filepath.Join(cfg.Out, "gage-backends-cpu.svg"))
}
