// Package gagebench is `neptune bench gage`: Gage's guarantees (issue 12)
// measured through `neptune gateway` processes in front of real node
// processes, beside the same load through a FIFO gateway (reservations
// off), nginx with limit_req per subscriber, and a direct Neptune client.
//
// Three service profiles (--profile): net, echo, whose cost is its message
// bytes, which the node measures exactly, so a GRU is the same on a
// loaded machine as on an idle one; cpu, work.spin computing 10 ms a
// request (one GRU of CPU, the thread's CPU time as the node measures
// it); disk, work.fsync writing and fsyncing 100 KB
// a request (one GRU of disk at the gateways' disk_bandwidth of 10 MB/s,
// a disk of the paper's time). The cpu profile runs at a quarter of the
// scale so that its capacity is a third of a core: the bottleneck is the
// declared capacity the gateway shares (both profiles keep the gateways
// on it, measured_capacity: false), not the machine's two cores, which the
// benchmark's own processes also need; the disk profile's requests wait on
// the device and use little CPU. The capacity is declared (the
// gateway's capacity_grps) and the nodes' reports refine it only in the
// resources they measure; the scheduler paces dispatches to it, so, as
// in the paper, the cluster's capacity is what is shared.
//
// The backends section (Figs 7-8, backends.go) and the deviation section
// (Figs 3-5, deviation.go) run on clusters of their own: back-end
// node processes confined to a CPU quota each, so that the back ends, not
// the machine, are the CPU the requests use.
package gagebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune/apps/work"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/cpuquota"
	"github.com/neptune-cluster/neptune/lab/localcluster"
	"github.com/neptune-cluster/neptune/lab/report"
)

// Sections are the parts of `neptune bench gage`, in the order they run.
var Sections = []string{"table1", "table2", "split", "overhead", "pace", "backends", "deviation"}

// confined are the sections on clusters of their own, whose back ends are
// confined to a CPU quota (cgroups: root); they run last.
var confined = Sections[5:]

// defaultSections leave out the confined ones: they need root and take
// minutes more.
var defaultSections = Sections[:5]

// Config are the knobs of `neptune bench gage`.
type Config struct {
	Sections []string
	// Profiles are the service profiles to run table1 and table2 with, of
	// net, cpu, disk (split and overhead run with net only).
	Profiles []string
	// Nodes host echo (partition 0).
	Nodes int
	// Scale multiplies the paper's figures: reservations 250:150:50 GRPS
	// (Table 1, capacity 600 GRPS), 250:200 (Table 2, capacity 700).
	Scale float64
	// Cell is the measured time per contender per round, after Warmup.
	Cell, Warmup time.Duration
	Rounds       int
	// Body is the echo request's bytes (the answer has as many): with
	// framing, about one GRU of 2,000 network bytes.
	Body int
	// MaxWait is the gateways' bound on a request's wait for its turn
	// (then 429); nginx's limit_req burst is the same wait at the rate.
	MaxWait time.Duration
	// Nginx is the nginx executable; its cells are INCONCLUSIVE if it is
	// not found.
	Nginx string
	// PeerTTL and GossipPeriod are the two gateways' (the split section).
	PeerTTL, GossipPeriod time.Duration
	// Concurrency is the closed-loop callers of the overhead section.
	Concurrency int
	// OverheadCell is the overhead section's time per contender per
	// round.
	OverheadCell time.Duration
	// Procs is the GOMAXPROCS of the gateway processes and of the load
	// generator (this process); 0 leaves Go's default, every core. One
	// core each is like nginx's one worker, and far more than their load
	// needs: sized for the whole machine, which the benchmark's seven-odd
	// processes share, each Go runtime wakes a second thread to look for
	// work whenever a goroutine is readied, which costs the machine CPU
	// (the load generator and the gateway spent about 40% of their CPU in
	// the scheduler) and makes tasks wait for a core. The nodes keep the
	// default: their accounting cycle reports CPU busy over GOMAXPROCS.
	Procs int
	Seed  uint64

	// Backends are the counts of back-end node processes of the backends
	// section (Figs 7-8), each confined to BackendCPU cores and loaded by
	// BackendCallers closed-loop callers per back end with work.spin
	// calls of BackendSpin of CPU. The section runs on clusters of its
	// own, not on Nodes.
	Backends       []int
	BackendCPU     float64
	BackendSpin    time.Duration
	BackendCallers int
	// Out is the directory of the backends and deviation sections' CSV
	// and SVG.
	Out string

	// DeviationBackends back-end node processes host work for the
	// deviation section (DeviationFigures, of Figs 3, 4 and 5), each
	// confined to DeviationCPU cores and, for Fig 4, DeviationMemory MiB
	// of memory, its page cache included; its subscribers reserve
	// gagesim.DeviationReservations × DeviationScale GRPS of work.spin
	// calls of DeviationSpin of CPU on average (Fig 4: work.read calls
	// of that CPU and a block of the row's footprint).
	DeviationBackends int
	DeviationCPU      float64
	DeviationSpin     time.Duration
	DeviationScale    float64
	DeviationFigures  []int
	DeviationMemory   int

	// Goals, fixed before the run (issue 12): the subscribers within
	// their reservations get at least GoalGot of what they ask; the spare
	// ratio within GoalSpare of the reservation ratio; a subscriber's
	// total through two gateways within GoalSplit of its reservation;
	// throughput with reservations at least GoalThroughput × without.
	GoalGot, GoalSpare, GoalSplit, GoalThroughput float64
}

// DefaultConfig is scale 0.2 (Table 1: 50:30:10 GRPS of 120), two nodes,
// 8 s cells after 2 s of warm-up, two rounds.
func DefaultConfig() Config {
	return Config{
		Sections: slices.Clone(defaultSections), Profiles: []string{"net"}, Nodes: 2, Scale: 0.2, Cell: 8 * time.Second, Warmup: 2 * time.Second, Rounds: 2,
		Body: 1000, MaxWait: 500 * time.Millisecond, Nginx: "nginx", PeerTTL: time.Second, GossipPeriod: 100 * time.Millisecond,
		Concurrency: 8, OverheadCell: 3 * time.Second, Procs: 1, Seed: 1,
		GoalGot: 0.99, GoalSpare: 0.03, GoalSplit: 0.05, GoalThroughput: 0.98,
		// 2 ms of CPU at 0.15 cores is about 75 requests/s a back end:
		// the back ends, not the gateway or the load generator, are the
		// bottleneck, and eight of them leave half a core for the rest.
		Backends: []int{1, 2, 4, 8}, BackendCPU: 0.15, BackendSpin: 2 * time.Millisecond, BackendCallers: 4, Out: "out/gage",
		// 37.5 GRPS of 1 ms spins: 0.375 cores, 375 requests a second
		// (50 for the smallest subscriber), on 0.8 cores of back ends:
		// each request costs a node about 0.2 ms beyond its spin, and the
		// two back ends are not loaded evenly.
		DeviationBackends: 2, DeviationCPU: 0.4, DeviationSpin: time.Millisecond, DeviationScale: 0.05, DeviationFigures: []int{3, 4, 5},
		// A node's own memory charged to its group is under 16 MiB
		// under the load: about 32 MiB of page cache, which keeps the
		// 32 MB file and misses most of the 128 MB one.
		DeviationMemory: 48,
	}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	for _, s := range c.Sections {
		if !slices.Contains(Sections, s) {
			return fmt.Errorf("gagebench: unknown section %q (want %v)", s, Sections)
		}
	}
	if len(c.Profiles) == 0 {
		return errors.New("gagebench: no profile")
	}
	for _, p := range c.Profiles {
		if _, ok := profiles[p]; !ok {
			return fmt.Errorf("gagebench: unknown profile %q (want net, cpu or disk)", p)
		}
	}
	switch {
	case c.Nodes < 1 || c.Rounds < 1 || c.Concurrency < 1:
		return errors.New("gagebench: nodes, rounds and concurrency must be >= 1")
	case c.Procs < 0:
		return errors.New("gagebench: procs must be >= 0")
	case c.Scale <= 0 || c.Body < 0:
		return errors.New("gagebench: scale must be > 0 and body >= 0")
	case c.Cell <= 0 || c.Warmup < 0 || c.OverheadCell <= 0 || c.MaxWait <= 0 || c.PeerTTL <= c.GossipPeriod || c.GossipPeriod <= 0:
		return errors.New("gagebench: cell, overhead cell, max wait and gossip period must be > 0, warm-up >= 0, peer TTL > gossip period")
	case !(c.GoalGot > 0 && c.GoalSpare > 0 && c.GoalSplit > 0 && c.GoalThroughput > 0):
		return errors.New("gagebench: goals must be > 0")
	}
	if slices.Contains(c.Sections, "backends") {
		if err := c.validateBackends(); err != nil {
			return err
		}
	}
	if slices.Contains(c.Sections, "deviation") {
		return c.validateDeviation()
	}
	return nil
}

// validateBackends checks the backends section's knobs, and that the
// largest count of back ends can have its quotas at once beside
// backendReserve cores for the gateway and the load generator.
func (c Config) validateBackends() error {
	switch {
	case len(c.Backends) == 0 || slices.Min(c.Backends) < 1:
		return errors.New("gagebench: backends must be counts >= 1")
	case c.BackendCPU <= 0 || c.BackendSpin <= 0 || c.BackendCallers < 1:
		return errors.New("gagebench: backend cpu and spin must be > 0, backend callers >= 1")
	case c.Out == "":
		return errors.New("gagebench: backends needs an output directory")
	}
	if err := cpuquota.Fits(slices.Repeat([]float64{c.BackendCPU}, slices.Max(c.Backends)), backendReserve); err != nil {
		return fmt.Errorf("gagebench: backends: %w", err)
	}
	return nil
}

// env is what every section shares: the node processes, this executable,
// the scratch directory.
type env struct {
	cfg   Config
	exe   string
	dir   string
	cl    *localcluster.Cluster
	nginx string  // "" if not found
	prof  profile // the profile being run
	hc    *http.Client
	w     io.Writer
}

// Run is `neptune bench gage`.
func Run(ctx context.Context, cfg Config, stdout io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	exe, dir, cleanup, err := localcluster.Scratch("neptune-bench-gage-")
	if err != nil {
		return err
	}
	defer cleanup()
	if cfg.Procs > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(cfg.Procs))
	}
	e := &env{cfg: cfg, exe: exe, dir: dir, cl: localcluster.New(exe, dir), nginx: findNginx(cfg.Nginx), hc: newHTTPClient(), w: stdout}
	defer e.cl.Close()
	isConfined := func(s string) bool { return slices.Contains(confined, s) }
	if slices.ContainsFunc(cfg.Sections, isConfined) {
		// Fail now, not after the other sections' minutes.
		r, err := cpuquota.Open(fmt.Sprintf("neptune-bench-gage-%d", os.Getpid()))
		if err != nil {
			return fmt.Errorf("gagebench: %s confine node processes (run as root): %w", strings.Join(confined, " and "), err)
		}
		if err := r.Close(); err != nil {
			return fmt.Errorf("gagebench: %w", err)
		}
		if !slices.ContainsFunc(cfg.Sections, func(s string) bool { return !isConfined(s) }) {
			return e.runConfined(ctx)
		}
	}
	// The nodes announce at the default interval (1 s): the announcements
	// only list what a node hosts, which does not change here, while
	// Gage's feedback rides every call's trailer (what the request used,
	// and the node's last 100 ms accounting cycle). Announcing every
	// 200 ms cost each of the benchmark's processes CPU for nothing.
	for i := range cfg.Nodes {
		if _, err := e.cl.Start(ctx, localcluster.Spec{ID: fmt.Sprint("n", i), Services: []string{"echo:0", "work:0"}}); err != nil {
			return err
		}
	}
	nginx := e.nginx
	if nginx == "" {
		nginx = fmt.Sprintf("NOT FOUND (%q): its cells are INCONCLUSIVE", cfg.Nginx)
	}
	fmt.Fprintf(stdout, "Gage through real processes: %d node processes hosting echo and work, gateways as `neptune gateway` processes, nginx %s.\n", cfg.Nodes, nginx)
	fmt.Fprintf(stdout, "GRU = 10 ms CPU, 10 ms disk, 2000 B network (the paper's). Profiles %s:\n", strings.Join(cfg.Profiles, ", "))
	for _, p := range cfg.Profiles {
		fmt.Fprintf(stdout, "  %s: %s\n", p, profiles[p].what(cfg))
	}
	procs := procsString(cfg.Procs)
	fmt.Fprintf(stdout, "Scale %.2g of the paper's reservations; cells %v after %v warm-up, %d rounds interleaved; max_wait %v; seed %d; GOMAXPROCS of the gateways and the load generator %s, of the nodes Go's default.\n\n",
		cfg.Scale, cfg.Cell, cfg.Warmup, cfg.Rounds, cfg.MaxWait, cfg.Seed, procs)
	var checks []*report.Check
	for _, pn := range cfg.Profiles {
		e.prof = profiles[pn]
		for _, s := range Sections {
			if !slices.Contains(cfg.Sections, s) || isConfined(s) {
				continue
			}
			if pn != "net" && (s == "split" || s == "overhead" || s == "pace") {
				continue // they measure the gateway, whatever the service
			}
			if len(cfg.Profiles) > 1 || pn != "net" {
				fmt.Fprintf(stdout, "== profile %s ==\n", pn)
			}
			var cs []*report.Check
			switch s {
			case "table1":
				cs, err = e.table1(ctx)
			case "table2":
				cs, err = e.table2(ctx)
			case "split":
				cs, err = e.split(ctx)
			case "overhead":
				cs, err = e.overhead(ctx)
			case "pace":
				cs, err = e.pace(ctx)
			}
			if err != nil {
				return fmt.Errorf("gagebench: %s, profile %s: %w", s, pn, err)
			}
			if pn != "net" {
				for _, c := range cs {
					c.Goal = "[" + pn + "] " + c.Goal
				}
			}
			checks = append(checks, cs...)
		}
	}
	cs, err := e.confinedSections(ctx)
	if err != nil {
		return err
	}
	printGoals(stdout, append(checks, cs...))
	return nil
}

// runConfined is a run of confined sections alone, which need none of the
// shared nodes.
func (e *env) runConfined(ctx context.Context) error {
	fmt.Fprintf(e.w, "Gage through real processes: back-end node processes confined with cgroups, `neptune gateway` processes; GOMAXPROCS of the gateways and the load generator %s.\n\n", procsString(e.cfg.Procs))
	checks, err := e.confinedSections(ctx)
	if err != nil {
		return err
	}
	printGoals(e.w, checks)
	return nil
}

// confinedSections runs the confined sections asked for, in order.
func (e *env) confinedSections(ctx context.Context) ([]*report.Check, error) {
	run := map[string]func(context.Context) ([]*report.Check, error){"backends": e.backends, "deviation": e.deviation}
	var checks []*report.Check
	for _, s := range confined {
		if !slices.Contains(e.cfg.Sections, s) {
			continue
		}
		cs, err := run[s](ctx)
		if err != nil {
			return nil, fmt.Errorf("gagebench: %s: %w", s, err)
		}
		checks = append(checks, cs...)
	}
	return checks, nil
}

// printGoals prints the verdicts and their tally.
func printGoals(stdout io.Writer, checks []*report.Check) {
	fmt.Fprintln(stdout, "Goals (issue 12, fixed before the run; judged on Gage's credit scheduler)")
	for _, c := range checks {
		fmt.Fprintln(stdout, c)
	}
	fmt.Fprintln(stdout, report.Tally(checks...))
}

// procsString is a GOMAXPROCS setting in words.
func procsString(procs int) string {
	if procs > 0 {
		return fmt.Sprint(procs)
	}
	return "Go's default"
}

// subscriberSpec is one subscriber of a gateway config.
type subscriberSpec struct {
	name string
	res  float64
}

func host(sub string) string { return sub + ".example" }

// gatewayConfig is a gateway's YAML: echo at /echo, subscribers told
// apart by Host, the declared capacity, and gossip if extra says so.
func (e *env) gatewayConfig(scheduler string, capacity float64, subs []subscriberSpec, extra string) string {
	return e.gatewayConfigFor(e.cl.Seeds(), scheduler, capacity, subs, extra)
}

// gatewayConfigFor is gatewayConfig joining seeds.
func (e *env) gatewayConfigFor(seeds []string, scheduler string, capacity float64, subs []subscriberSpec, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: 127.0.0.1:0\nmetrics: 127.0.0.1:0\njoin: [%s]\nscheduler: %s\ncapacity_grps: %g\nmax_wait: %v\ntimeout: 10s\nqueue: 1024\n",
		strings.Join(seeds, ", "), scheduler, capacity, e.cfg.MaxWait)
	if e.prof.diskBW > 0 {
		fmt.Fprintf(&b, "disk_bandwidth: %d\n", e.prof.diskBW)
	}
	if e.prof.declared {
		b.WriteString("measured_capacity: false\n")
	}
	b.WriteString(extra)
	b.WriteString("subscribers:\n")
	for _, s := range subs {
		fmt.Fprintf(&b, "  - {name: %s, reservation: %g, rules: [{host: %s}]}\n", s.name, s.res, host(s.name))
	}
	fmt.Fprintf(&b, "routes: [{path_prefix: %s, service: %s, method: %s}]\n", e.prof.path, e.prof.service, e.prof.method)
	return b.String()
}

// waitReady sends one request of each subscriber through target until
// all are answered 200.
func (e *env) waitReady(ctx context.Context, target string, subs []subscriberSpec) error {
	body := e.prof.body(e.cfg)
	return localcluster.Wait(ctx, 20*time.Second, func(ctx context.Context) error {
		for _, s := range subs {
			out := drive1(ctx, e.hc, target, e.prof.path, host(s.name), body)
			if out != http.StatusOK {
				return fmt.Errorf("%s via %s: status %d", s.name, target, out)
			}
		}
		return nil
	})
}

// drive1 sends one request and returns its status (0: no answer).
func drive1(ctx context.Context, hc *http.Client, target, path, host string, body []byte) int {
	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+target+path, strings.NewReader(string(body)))
	if err != nil {
		return 0
	}
	req.Host = host
	resp, err := hc.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// contender is one way of serving a section's load: the process clients
// send to, and the gateway whose status tells the cost of a request.
type contender struct {
	name    string
	target  *proc // nil: missing (nginx not found)
	gateway *proc
	missing string
}

// cellResult is one contender's cell: per subscriber, what was asked,
// answered and dropped in the measured window (by the clients), and what
// the gateway served in it (GRU, by its status at the window's ends).
type cellResult struct {
	counts map[string]*tally
	gru    map[string]float64 // served in the window
	n      map[string]int64   // requests served in the window
	starve bench.Starvation
	late   time.Duration
	secs   float64
	// from and outs are the last cell's measured window's start and its
	// requests, for sections that look at them one cell at a time.
	from time.Time
	outs []outcome
}

func (r *cellResult) add(o *cellResult) {
	if r.counts == nil {
		r.counts, r.gru, r.n = map[string]*tally{}, map[string]float64{}, map[string]int64{}
	}
	for s, t := range o.counts {
		if r.counts[s] == nil {
			r.counts[s] = &tally{}
		}
		c := r.counts[s]
		c.asked, c.ok, c.dropped, c.other = c.asked+t.asked, c.ok+t.ok, c.dropped+t.dropped, c.other+t.other
	}
	for s, g := range o.gru {
		r.gru[s] += g
		r.n[s] += o.n[s]
	}
	r.starve = r.starve.Worse(o.starve)
	r.late = max(r.late, o.late)
	r.secs += o.secs
}

// servedGRPS is what the gateway served sub in the windows, in GRPS.
func (r *cellResult) servedGRPS(sub string) float64 {
	if r == nil || r.secs == 0 {
		return 0
	}
	return r.gru[sub] / r.secs
}

// costOf is what one of sub's requests cost, in GRU.
func (r *cellResult) costOf(sub string) float64 {
	if r == nil || r.n[sub] == 0 {
		return math.NaN()
	}
	return r.gru[sub] / float64(r.n[sub])
}

// runCell drives flows at c for the warm-up and a cell of the given length
// and measures the window after the warm-up.
func (e *env) runCell(ctx context.Context, c contender, flows []flow, cell time.Duration, seed uint64) (*cellResult, error) {
	for i := range flows {
		flows[i].targets = []string{c.target.http}
		flows[i].weights = []float64{1}
	}
	probe := bench.StartLagProbe(5 * time.Millisecond)
	start := time.Now()
	from, to := start.Add(e.cfg.Warmup), start.Add(e.cfg.Warmup+cell)
	cctx, cancel := context.WithDeadline(ctx, to)
	defer cancel()
	done := make(chan []outcome, 1)
	go func() { done <- drive(cctx, e.hc, flows, e.prof.path, e.prof.body(e.cfg), seed) }()
	time.Sleep(time.Until(from))
	before, err1 := c.gateway.status(e.hc)
	t0 := time.Now()
	time.Sleep(time.Until(to))
	after, err2 := c.gateway.status(e.hc)
	secs := time.Since(t0).Seconds()
	outs := <-done
	st := probe.Stop()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("%s: status: %w", c.name, err)
	}
	res := &cellResult{counts: count(outs, from, to), gru: map[string]float64{}, n: map[string]int64{}, starve: st, late: lateness(outs, from, to), secs: secs, from: from, outs: outs}
	for _, f := range flows {
		b, a := sub(before, f.sub), sub(after, f.sub)
		res.gru[f.sub], res.n[f.sub] = a.ServedGRU-b.ServedGRU, a.Served-b.Served
	}
	return res, nil
}

// starvedDoubts adds the doubts a cell's starvation casts on c.
func starvedDoubts(c *report.Check, r *cellResult, what string) *report.Check {
	if r == nil {
		return c
	}
	r.starve.Doubt(c, what)
	cond, why := bench.Starved("the load generator of "+what+" (arrivals' mean lateness)", r.late)
	return c.Doubt(cond, "%s", why)
}

func pct(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*x)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// profile is a service profile: what a request runs on the nodes and how
// the gateways route to it.
type profile struct {
	path, service, method string
	body                  func(Config) []byte
	// scale multiplies Config.Scale for this profile.
	scale float64
	// diskBW, if > 0, is the gateways' disk_bandwidth (bytes/s).
	diskBW int
	// declared keeps the gateways on the declared capacity
	// (measured_capacity: false; requests are still charged what the nodes
	// measured): the nodes' CPU busy figure is the whole machine's, which the
	// benchmark's other processes share, and the disk's utilisation counts
	// the device's time, not disk_bandwidth's, so either estimate would
	// measure the machine rather than the capacity the cell shares.
	declared bool
	what     func(Config) string
}

// profiles are the service profiles of --profile.
var profiles = map[string]profile{
	"net": {path: "/echo", service: "echo", method: "echo", scale: 1,
		body: func(c Config) []byte { return make([]byte, c.Body) },
		what: func(c Config) string {
			return fmt.Sprintf("echo of %d B, about 1 GRU of network as the nodes measure it; scale %.2g", c.Body, c.Scale)
		}},
	"cpu": {path: "/spin", service: "work", method: "spin", scale: 0.25, declared: true,
		body: func(Config) []byte { return work.Encode(10 * time.Millisecond) },
		what: func(c Config) string {
			return fmt.Sprintf("work.spin computing 10 ms, 1 GRU of CPU (the thread's CPU time); scale %.2g (Table 1's capacity %.0f GRPS = %.2f cores)", c.Scale*0.25, 600*c.Scale*0.25, 6*c.Scale*0.25)
		}},
	"disk": {path: "/fsync", service: "work", method: "fsync", scale: 1, diskBW: 10_000_000, declared: true,
		body: func(Config) []byte { return work.EncodeBytes(100_000) },
		what: func(c Config) string {
			return fmt.Sprintf("work.fsync writing and fsyncing 100 KB, 1 GRU of disk at disk_bandwidth 10 MB/s (the thread's write_bytes); scale %.2g", c.Scale)
		}},
}
