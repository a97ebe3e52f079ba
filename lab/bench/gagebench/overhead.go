package gagebench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/gage"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/cpuquota"
	"github.com/neptune-cluster/neptune/lab/report"
)

// overheadBody is the overhead section's echo request: small, so the
// figures are the proxies' per-request cost, not copying.
const overheadBody = 100

// overhead compares, on the same nodes: a direct Neptune client; the
// gateway with reservations (credit) and without (fifo), both with a
// capacity far above the load so only their own cost shows; and nginx
// as a plain reverse proxy in front of the credit gateway, the reference
// for what a proxy hop costs. Sequential calls give the latency each
// adds; --concurrency closed-loop callers give throughput and, from
// /proc, the CPU the proxy process spends per request.
func (e *env) overhead(ctx context.Context) ([]*report.Check, error) {
	subs := []subscriberSpec{{"site1", 250 * e.cfg.Scale}}
	const capacity = 1e6
	sec := e.cl.SecurityArgs("")
	gw, err := startGateway(ctx, e.exe, e.dir, "oh-gage", e.gatewayConfig("credit", capacity, subs, ""), sec, e.cfg.Procs)
	if err != nil {
		return nil, err
	}
	defer gw.kill()
	fifo, err := startGateway(ctx, e.exe, e.dir, "oh-fifo", e.gatewayConfig("fifo", capacity, subs, ""), sec, e.cfg.Procs)
	if err != nil {
		return nil, err
	}
	defer fifo.kill()
	var ng *proc
	if e.nginx != "" {
		if ng, err = startNginx(ctx, e.nginx, e.dir, "oh-nginx", gw.http, nil); err != nil {
			return nil, err
		}
		defer ng.kill()
	}
	for _, p := range []*proc{gw, fifo, ng} {
		if p != nil {
			if err := e.waitReady(ctx, p.http, subs); err != nil {
				return nil, err
			}
		}
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: e.cl.Seeds(), Security: e.cl.ClientSecurity("client/client")})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	direct := func(ctx context.Context, body []byte) error {
		_, err := c.Call(ctx, "echo", 0, "echo", body)
		return err
	}
	if err := waitFor(ctx, 10*time.Second, func() bool { return direct(ctx, nil) == nil }); err != nil {
		return nil, fmt.Errorf("direct client: %w", err)
	}
	via := func(p *proc) func(context.Context, []byte) error {
		return func(ctx context.Context, body []byte) error {
			req, err := http.NewRequestWithContext(ctx, "POST", "http://"+p.http+"/echo", bytes.NewReader(body))
			if err != nil {
				return err
			}
			req.Host = host("site1")
			resp, err := e.hc.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}
	}
	type row struct {
		name      string
		call      func(context.Context, []byte) error
		proc      *proc // whose CPU is counted; nil: none
		seq, conc bench.Cell
		cpu       time.Duration
		perRound  []float64
		// treeCPU is, per round, the CPU the whole benchmark (load
		// generator, gateways, nodes) spent per request of the
		// throughput cells: the inverse of a saturated machine's
		// throughput, and far steadier than a closed loop's rate.
		treeCPU []float64
	}
	rows := []*row{
		{name: "direct client", call: direct},
		{name: "gateway, reservations on (credit)", call: via(gw), proc: gw},
		{name: "gateway, reservations off (fifo)", call: via(fifo), proc: fifo},
	}
	if ng != nil {
		rows = append(rows, &row{name: "nginx proxy -> credit gateway", call: via(ng), proc: ng})
	}
	body := make([]byte, overheadBody)
	// conc runs one closed-loop slice of rw for d, counting its proxy's CPU.
	// It adds the CPU the benchmark's process tree spent to *tree.
	conc := func(rw *row, d time.Duration, into *bench.Cell, tree *time.Duration) error {
		var cpu0 time.Duration
		if rw.proc != nil {
			cpu0, _ = cpuquota.ProcessCPU(rw.proc.cmd.Process.Pid)
		}
		t0, _ := bench.TreeCPU()
		if err := bench.RunCell(ctx, rw.call, body, e.cfg.Concurrency, d, into); err != nil {
			return fmt.Errorf("%s: %w", rw.name, err)
		}
		t1, _ := bench.TreeCPU()
		*tree += t1 - t0
		if rw.proc != nil {
			cpu1, _ := cpuquota.ProcessCPU(rw.proc.cmd.Process.Pid)
			rw.cpu += cpu1 - cpu0
		}
		return nil
	}
	// perRequest is cpu over the requests a cell completed.
	perRequest := func(cpu time.Duration, c *bench.Cell) float64 {
		return cpu.Seconds() / float64(max(c.Latency().N, 1))
	}
	probe := bench.StartLagProbe(5 * time.Millisecond)
	for r := range e.cfg.Rounds {
		fmt.Fprintf(e.w, "  [overhead round %d/%d]\n", r+1, e.cfg.Rounds)
		for _, rw := range rows {
			if err := bench.RunCell(ctx, rw.call, body, 1, e.cfg.OverheadCell, &rw.seq); err != nil {
				return nil, fmt.Errorf("%s: %w", rw.name, err)
			}
		}
		// The judged pair (reservations on and off) runs its throughput in
		// overheadSlices slices each, in the order ABBA ABBA (BAAB in odd
		// rounds): the machine's speed drifts by several percent within a
		// round here, which a cell run wholly before the other charges to
		// one of them; alternating spreads the drift over both alike.
		pair := [2]*row{rows[1], rows[2]}
		if r%2 == 1 {
			pair[0], pair[1] = pair[1], pair[0]
		}
		var cells [2]bench.Cell
		var trees [2]time.Duration
		for i := range 2 * overheadSlices {
			k := (i + i/2) % 2 // 0 1 1 0 0 1 1 0 ...
			if err := conc(pair[k], e.cfg.OverheadCell/overheadSlices, &cells[k], &trees[k]); err != nil {
				return nil, err
			}
		}
		for k, rw := range pair {
			rw.perRound = append(rw.perRound, cells[k].Rate())
			rw.treeCPU = append(rw.treeCPU, perRequest(trees[k], &cells[k]))
			rw.conc.Add(&cells[k])
		}
		for _, rw := range append([]*row{rows[0]}, rows[3:]...) {
			var cell bench.Cell
			var tree time.Duration
			if err := conc(rw, e.cfg.OverheadCell, &cell, &tree); err != nil {
				return nil, err
			}
			rw.perRound = append(rw.perRound, cell.Rate())
			rw.treeCPU = append(rw.treeCPU, perRequest(tree, &cell))
			rw.conc.Add(&cell)
		}
	}
	st := probe.Stop()
	fmt.Fprintf(e.w, "Overhead: echo of %d B, %d rounds of %v per contender and mode; sequential (1 caller) and %d closed-loop callers.\n",
		overheadBody, e.cfg.Rounds, e.cfg.OverheadCell, e.cfg.Concurrency)
	fmt.Fprintln(e.w, "added = mean sequential latency over the hop below it (the gateways over the direct client, nginx over the credit gateway it fronts).")
	t := report.NewTable("contender", "seq mean", "p50", "p99", "added", "req/s", "x fifo", "proxy CPU/request", "all CPU/request")
	base := rows[0].seq.Latency().Mean
	for i, rw := range rows {
		lat := rw.seq.Latency()
		ref := base
		if i == 3 {
			ref = rows[1].seq.Latency().Mean
		}
		added := "-"
		if i > 0 {
			added = fmt.Sprintf("%+.0f µs", float64(lat.Mean-ref)/float64(time.Microsecond))
		}
		cpu := "-"
		if rw.proc != nil && rw.conc.Latency().N > 0 {
			cpu = fmt.Sprintf("%.0f µs", float64(rw.cpu)/float64(time.Microsecond)/float64(rw.conc.Latency().N))
		}
		t.Add(rw.name, lat.Fmt(lat.Mean), lat.Fmt(lat.P50), lat.Fmt(lat.P99), added, fmt.Sprintf("%.0f", rw.conc.Rate()),
			fmt.Sprintf("%.3f", rw.conc.Rate()/rows[2].conc.Rate()), cpu, fmt.Sprintf("%.0f µs", 1e6*report.Mean(rw.treeCPU)))
	}
	t.Print(e.w)
	if ng == nil {
		fmt.Fprintf(e.w, "(nginx not found (%q): no proxy-cost reference row)\n", e.cfg.Nginx)
	}
	fmt.Fprintln(e.w, "all CPU/request: what the benchmark's whole process tree (load generator, gateways, nodes) spent per request of the closed loop.")
	fmt.Fprintln(e.w)
	on, off := rows[1], rows[2]
	var rate, saturated []float64
	for r := range on.perRound {
		rate = append(rate, on.perRound[r]/off.perRound[r])
		saturated = append(saturated, off.treeCPU[r]/on.treeCPU[r])
	}
	g := e.cfg.GoalThroughput
	checks := []*report.Check{
		ratioVerdict(fmt.Sprintf("overhead: gateway throughput with reservations >= %.2fx without", g), on.conc.Rate()/off.conc.Rate(), rate, g),
		ratioVerdict(fmt.Sprintf("overhead: capacity with reservations >= %.2fx without (CPU per request of every process, without over with)", g),
			report.Mean(off.treeCPU)/report.Mean(on.treeCPU), saturated, g),
	}
	for _, ch := range checks {
		st.Doubt(ch, "the overhead cells")
	}
	// The schedulers alone, in this process: the only difference between
	// the two gateways.
	creditCost, err := schedulerCost(func(c gage.Config, o gage.Options) (gage.Scheduler, error) { return gage.NewCredit(c, o) }, len(subs), 100_000, 5)
	if err != nil {
		return nil, err
	}
	fifoCost, err := schedulerCost(func(c gage.Config, o gage.Options) (gage.Scheduler, error) { return gage.NewFIFO(c, o) }, len(subs), 100_000, 5)
	if err != nil {
		return nil, err
	}
	offCPU := time.Duration(report.Mean(off.treeCPU) * float64(time.Second))
	fmt.Fprintf(e.w, "scheduler alone per request (Enqueue, Next, Wake, Report; fastest of 5 × 100,000): credit %v, fifo %v\n\n", creditCost, fifoCost)
	return append(checks, schedCostVerdict(creditCost, fifoCost, offCPU, g)), nil
}

// overheadSlices is how many slices each judged contender's throughput
// cell is cut into per round, alternated ABBA with the other's.
const overheadSlices = 4

// ratioVerdict judges an overhead goal: a ratio of with reservations to
// without at least goal, pooled, every round agreeing. It judges both
// the closed loop's throughput, which varies ±8% from round to round on
// 2 shared cores, and the capacity a saturated machine would give (the
// inverse ratio of CPU per request), which varies far less.
func ratioVerdict(name string, pooled float64, perRound []float64, goal float64) *report.Check {
	var ok []bool
	each := make([]string, len(perRound))
	for i, r := range perRound {
		ok = append(ok, r >= goal)
		each[i] = fmt.Sprintf("%.3f", r)
	}
	c := report.AtLeast(name, pooled, goal, fmt.Sprintf("%.3fx (rounds: %s)", pooled, strings.Join(each, ", ")))
	return report.Rounds(c, ok)
}
