package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/work"
	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/localcluster"
	"github.com/neptune-cluster/neptune/internal/sim"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// The real-cluster load-balancing benchmark (dissertation §3.4, issue 3):
// `bench lb` starts the servers and HAProxy, then for every contender
// re-executes this binary as `bench lb-client` processes that replay their
// share of one seeded open-loop arrival trace and print their measurements
// as JSON.

// lbServer is one node of the benchmark cluster.
type lbServer struct {
	ID, RPC, Poll string
}

// lbCell is one contender run against one trace; its fields are the
// lb-client flags.
type lbCell struct {
	Label     string
	Workload  string
	Load      float64
	Policy    string // a balance name, or "haproxy"
	Target    string // HAProxy frontend address for Policy "haproxy"
	PollSize  int
	Discard   time.Duration
	Clients   int // independent policy instances
	Procs     int // client processes they are spread over
	Duration  time.Duration
	Warmup    time.Duration
	Scale     float64
	Capacity  float64 // in healthy servers, for the arrival rate
	Broadcast time.Duration
	Seed      uint64
}

// lbResult is what one lb-client process measured (durations in ns).
type lbResult struct {
	Lat, Poll []int64
	// Lag is how late each measured request left its client process,
	// against the trace: CPU starvation of the client, not balancing.
	Lag      []int64
	Errors   int
	FirstErr string
}

func (r *lbResult) merge(o lbResult) {
	r.Lat = append(r.Lat, o.Lat...)
	r.Poll = append(r.Poll, o.Poll...)
	r.Lag = append(r.Lag, o.Lag...)
	r.Errors += o.Errors
	if r.FirstErr == "" {
		r.FirstErr = o.FirstErr
	}
}

type lbStats struct {
	mean, p99, poll, lag time.Duration
	n, errors            int
}

func (r lbResult) stats() lbStats {
	s := lbStats{n: len(r.Lat), errors: r.Errors}
	if len(r.Lat) == 0 {
		return s
	}
	lat := slices.Clone(r.Lat)
	slices.Sort(lat)
	var sum, psum, lsum int64
	for i, l := range lat {
		sum += l
		psum += r.Poll[i]
		lsum += r.Lag[i]
	}
	s.mean = time.Duration(sum / int64(len(lat)))
	s.poll = time.Duration(psum / int64(len(lat)))
	s.lag = time.Duration(lsum / int64(len(lat)))
	s.p99 = time.Duration(lat[min(len(lat)*99/100, len(lat)-1)])
	return s
}

func benchLB(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("bench lb", "[-duration 3s] [-goal-duration 10s] [-workloads exp,fine] [-loads 0.5,0.9] [-sections main,fig35,goals]")
	var (
		servers   = fs.Int("servers", 16, "server nodes, each one FIFO processing unit")
		clients   = fs.Int("clients", 16, "independent client policy instances")
		procs     = fs.Int("procs", 4, "client processes the instances are spread over")
		duration  = fs.Duration("duration", 3*time.Second, "trace length per contender (main table and Fig 3.5)")
		goalDur   = fs.Duration("goal-duration", 6*time.Second, "trace length per contender per round in the goals section")
		rounds    = fs.Int("goal-rounds", 3, "goals section: rounds, each a new trace replayed by every contender in turn, pooled")
		warmup    = fs.Duration("warmup", 500*time.Millisecond, "unmeasured start of each trace")
		workloads = fs.String("workloads", "exp,fine", "workloads: exp (Poisson/Exp, 50 ms) and/or fine (fine-grain, 22.2 ms ± 10.0 ms)")
		loads     = fs.String("loads", "0.5,0.9", "offered loads for the main table")
		sections  = fs.String("sections", "main,fig35,goals", "which parts to run")
		scale     = fs.Float64("scale", 1, "multiply every service time (and the arrival interval) by this")
		bcast     = fs.Duration("broadcast", 100*time.Millisecond, "broadcast policy's mean push interval")
		slow      = fs.Float64("slow", 10, "slowdown of the degraded replica in the goals section")
		seed      = fs.Uint64("seed", 1, "trace seed (shared by every contender of a row group)")
		haproxy   = fs.String("haproxy", "haproxy", "HAProxy executable; the peer rows are skipped if it is not found")
	)
	if err := parse(fs, args); err != nil {
		return err
	}
	wls := strings.Split(*workloads, ",")
	for _, w := range wls {
		if w != "exp" && w != "fine" {
			return usagef("-workloads: %q is neither exp nor fine", w)
		}
	}
	var loadList []float64
	for _, s := range strings.Split(*loads, ",") {
		l, err := strconv.ParseFloat(s, 64)
		if err != nil || l <= 0 || l >= 1 {
			return usagef("-loads: %q is not a load in (0, 1)", s)
		}
		loadList = append(loadList, l)
	}
	secs := strings.Split(*sections, ",")
	switch {
	case *servers < 2:
		return usagef("-servers must be >= 2, got %d", *servers)
	case *clients < 1 || *procs < 1 || *rounds < 1:
		return usagef("-clients, -procs and -goal-rounds must be >= 1")
	case *duration <= *warmup || *goalDur <= *warmup:
		return usagef("-duration and -goal-duration must exceed -warmup (%v)", *warmup)
	case *scale <= 0 || *slow < 1:
		return usagef("-scale must be > 0 and -slow >= 1")
	}
	*procs = min(*procs, *clients)

	exe, dir, cleanup, err := scratch("neptune-bench-lb-")
	if err != nil {
		return err
	}
	defer cleanup()
	srv, stop, err := startLBCluster(ctx, exe, dir, *servers)
	if err != nil {
		return err
	}
	defer stop()
	conns := transport.NewConns()
	defer conns.Close()

	proxy, err := startHAProxy(ctx, *haproxy, dir, srv)
	switch {
	case errors.Is(err, exec.ErrNotFound):
		fmt.Fprintf(stdout, "HAProxy rows skipped: %q not found (install it with: sudo apt-get install -y haproxy)\n", *haproxy)
	case err != nil:
		return err
	default:
		defer proxy.stop()
		fmt.Fprintf(stdout, "HAProxy %s in front of the same %d gRPC ports (proto h2): leastconn %s, random(2) %s\n", proxy.version, len(srv), proxy.leastconn, proxy.random2)
	}

	def := balance.DefaultConfig()
	base := lbCell{Clients: *clients, Procs: *procs, Warmup: *warmup, Scale: *scale, Capacity: float64(len(srv)),
		Broadcast: *bcast, Seed: *seed, PollSize: def.PollSize, Discard: def.Discard}
	runRaw := func(c lbCell) (lbResult, error) {
		if c.Policy == balance.NameOracle {
			// Exact join-shortest-queue: one client, the only sender, whose
			// own outstanding requests per server are the servers' queues.
			c.Clients, c.Procs = 1, 1
		}
		res, err := runLBCell(ctx, exe, srv, c)
		if err != nil {
			return lbResult{}, fmt.Errorf("bench lb: %s: %w", c.Label, err)
		}
		if res.Errors > 0 {
			fmt.Fprintf(stdout, "  (%s: %d failed calls, first: %s)\n", c.Label, res.Errors, res.FirstErr)
		}
		return res, nil
	}
	run := func(c lbCell) (lbStats, error) {
		res, err := runRaw(c)
		if err != nil {
			return lbStats{}, err
		}
		st := res.stats()
		if st.n == 0 {
			return st, fmt.Errorf("bench lb: %s measured no request (first error: %s)", c.Label, res.FirstErr)
		}
		return st, nil
	}
	contenders := func() []lbCell {
		cs := []lbCell{
			{Label: balance.NameOracle, Policy: balance.NameOracle},
			{Label: "default:" + def.Policy, Policy: def.Policy},
			{Label: "poll-3 (10ms discard)", Policy: balance.NamePolling},
			{Label: balance.NameLocalP2C, Policy: balance.NameLocalP2C},
			{Label: "broadcast-" + bcast.String(), Policy: balance.NameBroadcast},
			{Label: balance.NameRoundRobin, Policy: balance.NameRoundRobin},
			{Label: balance.NameRandom, Policy: balance.NameRandom},
		}
		if proxy != nil {
			cs = append(cs,
				lbCell{Label: "haproxy leastconn", Policy: "haproxy", Target: proxy.leastconn},
				lbCell{Label: "haproxy random(2)", Policy: "haproxy", Target: proxy.random2})
		}
		return cs
	}
	start := time.Now()
	fmt.Fprintf(stdout, "bench lb: %d servers (1 worker each, sleep-emulated service ×%g), %d clients in %d processes, seed %d\n",
		len(srv), *scale, *clients, *procs, *seed)
	head := fmt.Sprintf("%-8s %5s %-28s %9s %9s %8s %8s %8s %7s %7s", "workload", "load", "policy", "mean ms", "p99 ms", "poll ms", "mean/or", "p99/or", "n", "lag ms")
	row := func(c lbCell, s, or lbStats) {
		warn := ""
		if s.lag > starvedLag {
			warn = "  ← client CPU-starved, rerun on a quieter machine"
		}
		fmt.Fprintf(stdout, "%-8s %5.2f %-28s %9.2f %9.2f %8.3f %8.3f %8.3f %7d %7.2f%s\n", c.Workload, c.Load, c.Label,
			msf(s.mean), msf(s.p99), msf(s.poll), float64(s.mean)/float64(or.mean), float64(s.p99)/float64(or.p99), s.n, msf(s.lag), warn)
	}

	// healthy90 keeps the exp/90% results the goals compare against.
	if slices.Contains(secs, "main") {
		fmt.Fprintf(stdout, "\nPolicies on one trace per row group (%v each, ratios to the oracle of the group)\n%s\n", *duration, head)
		for _, w := range wls {
			for _, l := range loadList {
				var or lbStats
				for i, c := range contenders() {
					c = mergeCell(base, c, w, l, *duration)
					s, err := run(c)
					if err != nil {
						return err
					}
					if i == 0 {
						or = s
					}
					row(c, s, or)
				}
			}
		}
	}
	if slices.Contains(secs, "fig35") {
		fmt.Fprintf(stdout, "\nFig 3.5 / Table 3.2 — poll size at 90%% load, without discarding (wait for every answer) and with the 10 ms discard (%v each)\n%s\n", *duration, head)
		for _, w := range wls {
			var or lbStats
			cells := []lbCell{{Label: balance.NameOracle, Policy: balance.NameOracle}, {Label: "random (poll 0)", Policy: balance.NameRandom}}
			for d := 1; d <= 8; d++ {
				cells = append(cells, lbCell{Label: fmt.Sprintf("poll-%d no discard", d), Policy: balance.NamePolling, PollSize: d, Discard: -1})
			}
			cells = append(cells, lbCell{Label: "poll-3 10ms discard", Policy: balance.NamePolling, PollSize: 3, Discard: 10 * time.Millisecond})
			for i, c := range cells {
				c = mergeCell(base, c, w, 0.9, *duration)
				s, err := run(c)
				if err != nil {
					return err
				}
				if i == 0 {
					or = s
				}
				row(c, s, or)
			}
		}
	}
	if slices.Contains(secs, "goals") {
		if err := lbGoals(ctx, stdout, conns, srv, base, *goalDur, *rounds, *slow, runRaw, row, head); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "\nbench lb took %v\n", time.Since(start).Round(time.Second))
	return nil
}

// mergeCell fills c's unset fields from base and sets the row group.
func mergeCell(base, c lbCell, workload string, load float64, d time.Duration) lbCell {
	out := base
	out.Label, out.Policy, out.Target = c.Label, c.Policy, c.Target
	if c.PollSize != 0 {
		out.PollSize = c.PollSize
	}
	switch {
	case c.Discard < 0:
		out.Discard = 0 // wait for every answer (capped at balance.WaitAllCap)
	case c.Discard > 0:
		out.Discard = c.Discard
	}
	if c.Capacity != 0 {
		out.Capacity = c.Capacity
	}
	out.Workload, out.Load, out.Duration = workload, load, d
	return out
}

func lbGoals(ctx context.Context, stdout io.Writer, conns *transport.Conns, srv []lbServer, base lbCell, d time.Duration, rounds int, slow float64,
	run func(lbCell) (lbResult, error), row func(lbCell, lbStats, lbStats), head string) error {
	def := balance.DefaultConfig().Policy
	fmt.Fprintf(stdout, "\nGoals — exp, 90%% load, %d servers, %d independent clients (%d rounds of %v per contender, pooled)\n%s\n", len(srv), base.Clients, rounds, d, head)
	slowLabel := fmt.Sprintf("default, 1 replica %g× slow", slow)
	cells := []lbCell{
		{Label: balance.NameOracle, Policy: balance.NameOracle},
		{Label: "default:" + def, Policy: def},
		{Label: balance.NameLocalP2C, Policy: balance.NameLocalP2C},
		// One replica slow: the offered load stays 90% of the degraded
		// capacity (as in the simulator), so only the balancing differs.
		{Label: slowLabel, Policy: def, Capacity: float64(len(srv)-1) + 1/slow},
	}
	pooled := map[string]*lbResult{}
	for r := range rounds {
		for _, c := range cells {
			c = mergeCell(base, c, "exp", 0.9, d)
			c.Seed = base.Seed + uint64(r)
			isSlow := c.Label == slowLabel
			if isSlow {
				if err := setSlowdown(ctx, conns, srv[0], slow); err != nil {
					return err
				}
			}
			res, err := run(c)
			if isSlow {
				if serr := setSlowdown(ctx, conns, srv[0], 1); err == nil {
					err = serr
				}
			}
			if err != nil {
				return err
			}
			if pooled[c.Label] == nil {
				pooled[c.Label] = &lbResult{}
			}
			pooled[c.Label].merge(res)
		}
	}
	res := map[string]lbStats{}
	for _, c := range cells {
		res[c.Label] = pooled[c.Label].stats()
		row(mergeCell(base, c, "exp", 0.9, d), res[c.Label], res[balance.NameOracle])
	}
	var (
		slowDef = res[slowLabel]
		dflt    = res["default:"+def]
	)
	or, p2c := res[balance.NameOracle], res[balance.NameLocalP2C]
	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "FAIL"
	}
	meanR, p99R := float64(dflt.mean)/float64(or.mean), float64(dflt.p99)/float64(or.p99)
	p2cR := float64(p2c.mean) / float64(dflt.mean)
	slowR := float64(slowDef.p99) / float64(dflt.p99)
	fmt.Fprintf(stdout, "\ngoals (default %s, exp, 90%%):\n", def)
	fmt.Fprintf(stdout, "  %s mean ≤ 1.2× oracle: %.3f× (%.1f vs %.1f ms)\n", verdict(meanR <= 1.2), meanR, msf(dflt.mean), msf(or.mean))
	fmt.Fprintf(stdout, "  %s p99 ≤ 1.35× oracle: %.3f× (%.1f vs %.1f ms)\n", verdict(p99R <= 1.35), p99R, msf(dflt.p99), msf(or.p99))
	fmt.Fprintf(stdout, "  %s mean ≥ 2× better than localp2c with %d clients: %.2f× (%.1f vs %.1f ms)\n", verdict(p2cR >= 2), base.Clients, p2cR, msf(p2c.mean), msf(dflt.mean))
	fmt.Fprintf(stdout, "  %s one replica %g× slower: p99 ≤ 1.5× healthy p99: %.3f× (%.1f vs %.1f ms)\n",
		verdict(slowR <= 1.5), slow, slowR, msf(slowDef.p99), msf(dflt.p99))
	return nil
}

// setSlowdown calls the work service's slowdown method on one node
// directly, bypassing the balancer.
func setSlowdown(ctx context.Context, conns *transport.Conns, s lbServer, factor float64) error {
	cl, err := conns.Client(s.RPC)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = cl.Call(ctx, &pb.CallRequest{Service: "work", Method: "slowdown", Mode: pb.Mode(neptune.Write), Body: []byte(strconv.FormatFloat(factor, 'g', -1, 64))})
	if err != nil {
		return fmt.Errorf("bench lb: slow down %s: %w", s.ID, transport.FromStatus(s.ID, err))
	}
	return nil
}

// starvedLag is the mean dispatch lateness above which a row's client
// processes did not get the CPU in time (other work on the machine); its
// numbers then measure the machine, not the policy.
const starvedLag = 2 * time.Millisecond

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// startLBCluster starts n nodes hosting work:0 with one worker each and
// returns their addresses from the yellow pages.
func startLBCluster(ctx context.Context, exe, dir string, n int) ([]lbServer, func(), error) {
	cfg := filepath.Join(dir, "work.yaml")
	if err := os.WriteFile(cfg, []byte("services:\n  - name: work\n    partitions: [0]\n    workers: 1\n"), 0o644); err != nil {
		return nil, nil, err
	}
	cl := localcluster.New(exe, dir)
	stop := cl.Close
	for i := range n {
		if _, err := cl.Start(ctx, localcluster.Spec{ID: fmt.Sprintf("s%02d", i+1), Args: []string{"-config", cfg, "-log-level", "warn"}}); err != nil {
			stop()
			return nil, nil, err
		}
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: cl.Seeds()})
	if err != nil {
		stop()
		return nil, nil, err
	}
	defer c.Close()
	if err := waitMembers(ctx, c, n, 20*time.Second); err != nil {
		stop()
		return nil, nil, err
	}
	var srv []lbServer
	for _, m := range c.Members(ctx, 0) {
		srv = append(srv, lbServer{ID: m.Node, RPC: m.RPCAddr, Poll: m.PollAddr})
	}
	slices.SortFunc(srv, func(a, b lbServer) int { return strings.Compare(a.ID, b.ID) })
	return srv, stop, nil
}

// haproxyPeer is a running HAProxy with two frontends over the same
// backends.
type haproxyPeer struct {
	version, leastconn, random2 string
	cmd                         *exec.Cmd
}

func (h *haproxyPeer) stop() { _ = h.cmd.Process.Kill(); _ = h.cmd.Wait() }

func startHAProxy(ctx context.Context, bin, dir string, srv []lbServer) (*haproxyPeer, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, err
	}
	ver, _ := exec.CommandContext(ctx, path, "-v").Output()
	h := &haproxyPeer{version: strings.Fields(string(ver) + " ? ?")[2]}
	var b strings.Builder
	b.WriteString("global\n  maxconn 4000\n  nbthread 1\n  tune.h2.max-concurrent-streams 2000\n")
	b.WriteString("defaults\n  mode http\n  timeout connect 5s\n  timeout client 120s\n  timeout server 120s\n")
	for _, alg := range []string{"leastconn", "random(2)"} {
		port, err := localcluster.FreePort()
		if err != nil {
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		name := strings.Trim(strings.NewReplacer("(", "", ")", "").Replace(alg), " ")
		fmt.Fprintf(&b, "frontend fe_%s\n  bind %s proto h2\n  default_backend be_%s\n", name, addr, name)
		fmt.Fprintf(&b, "backend be_%s\n  balance %s\n", name, alg)
		for _, s := range srv {
			fmt.Fprintf(&b, "  server %s %s proto h2\n", s.ID, s.RPC)
		}
		if alg == "leastconn" {
			h.leastconn = addr
		} else {
			h.random2 = addr
		}
	}
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "haproxy.log"))
	if err != nil {
		return nil, err
	}
	h.cmd = exec.Command(path, "-db", "-f", cfg)
	h.cmd.Stdout, h.cmd.Stderr = logf, logf
	if err := h.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench lb: start haproxy: %w", err)
	}
	for _, addr := range []string{h.leastconn, h.random2} {
		if err := waitTCP(ctx, addr, 5*time.Second); err != nil {
			h.stop()
			out, _ := os.ReadFile(logf.Name())
			return nil, fmt.Errorf("bench lb: haproxy did not listen on %s: %w\n%s", addr, err, out)
		}
	}
	return h, nil
}

func waitTCP(ctx context.Context, addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// runLBCell runs one contender: c.Procs client processes replaying the
// trace from a common start time, and merges what they measured.
func runLBCell(ctx context.Context, exe string, srv []lbServer, c lbCell) (lbResult, error) {
	var list []string
	for _, s := range srv {
		list = append(list, s.ID+"@"+s.RPC+"@"+s.Poll)
	}
	// Give every process time to start before the trace begins.
	startAt := time.Now().Add(300*time.Millisecond + 50*time.Millisecond*time.Duration(c.Procs))
	var (
		mu     sync.Mutex
		merged lbResult
		wg     sync.WaitGroup
		errs   []error
	)
	for p := range c.Procs {
		args := []string{"bench", "lb-client",
			"-servers", strings.Join(list, ","), "-workload", c.Workload, "-load", ftoa(c.Load),
			"-policy", c.Policy, "-target", c.Target, "-poll-size", strconv.Itoa(c.PollSize), "-discard", c.Discard.String(),
			"-clients", strconv.Itoa(c.Clients), "-procs", strconv.Itoa(c.Procs), "-proc", strconv.Itoa(p),
			"-duration", c.Duration.String(), "-warmup", c.Warmup.String(), "-scale", ftoa(c.Scale),
			"-capacity", ftoa(c.Capacity), "-broadcast", c.Broadcast.String(), "-seed", strconv.FormatUint(c.Seed, 10),
			"-start", strconv.FormatInt(startAt.UnixNano(), 10)}
		cmd := exec.CommandContext(ctx, exe, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return lbResult{}, err
		}
		if err := cmd.Start(); err != nil {
			return lbResult{}, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r lbResult
			derr := json.NewDecoder(bufio.NewReader(out)).Decode(&r)
			werr := cmd.Wait()
			mu.Lock()
			defer mu.Unlock()
			if err := errors.Join(derr, werr); err != nil {
				errs = append(errs, fmt.Errorf("client process %d: %w: %s", p, err, stderr.String()))
				return
			}
			merged.merge(r)
		}()
	}
	wg.Wait()
	return merged, errors.Join(errs...)
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// lbWorkload maps the benchmark's workload names to the simulator's
// distributions, so both sides of issue 3 replay the same shapes.
func lbWorkload(name string) (sim.Workload, error) {
	switch name {
	case "exp":
		return sim.PoissonExp, nil
	case "fine":
		return sim.FineGrain, nil
	}
	return sim.Workload{}, usagef("-workload %q: want exp or fine", name)
}

// lbRequest is one request of the trace.
type lbRequest struct {
	at, service time.Duration
	client      int
}

// lbTrace draws the open-loop trace: arrivals that keep capacity servers
// busy at load, service times, and the client of each request. It depends
// only on its arguments, so every contender sees the same requests.
func lbTrace(w sim.Workload, load, capacity, scale float64, clients int, d time.Duration, seed uint64) []lbRequest {
	rng := rand.New(rand.NewPCG(seed, 0x7ace))
	svc := w.Service.Scaled(time.Duration(float64(w.Service.Mean) * scale))
	inter := w.Interarrival.Scaled(time.Duration(float64(svc.Mean) / (load * capacity)))
	var out []lbRequest
	for t := inter.Sample(rng); t < d; t += inter.Sample(rng) {
		out = append(out, lbRequest{at: t, service: svc.Sample(rng), client: rng.IntN(clients)})
	}
	return out
}

// lbInstance is one independent client: its own policy and, for the
// oracle, its own count of outstanding requests per server.
type lbInstance struct {
	mu          sync.Mutex
	pol         balance.Policy
	outstanding map[string]int
	// poller is the instance's own, so answers arriving after a choice
	// reach this instance's policy (as neptune.Client does).
	poller *transport.Poller
}

// benchLBClient is the hidden `bench lb-client` process: it replays the
// requests of its instances (client index ≡ proc mod procs) and prints one
// JSON lbResult.
func benchLBClient(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("bench lb-client", "(internal to bench lb)")
	var (
		servers   = fs.String("servers", "", "id@rpc@poll,...")
		wname     = fs.String("workload", "exp", "exp or fine")
		load      = fs.Float64("load", 0.9, "offered load")
		policy    = fs.String("policy", "", "balance policy or haproxy")
		target    = fs.String("target", "", "HAProxy frontend for -policy haproxy")
		pollSize  = fs.Int("poll-size", 3, "polling's poll size")
		discard   = fs.Duration("discard", 10*time.Millisecond, "poll discard deadline (0: wait for all)")
		clients   = fs.Int("clients", 16, "instances in all processes")
		procs     = fs.Int("procs", 1, "client processes")
		proc      = fs.Int("proc", 0, "this process's index")
		duration  = fs.Duration("duration", 3*time.Second, "trace length")
		warmup    = fs.Duration("warmup", 0, "unmeasured start")
		scale     = fs.Float64("scale", 1, "service time scale")
		capacity  = fs.Float64("capacity", 16, "capacity in healthy servers")
		bcast     = fs.Duration("broadcast", 100*time.Millisecond, "broadcast interval")
		seed      = fs.Uint64("seed", 1, "trace seed")
		startNano = fs.Int64("start", 0, "trace start, Unix ns")
	)
	if err := parse(fs, args); err != nil {
		return err
	}
	w, err := lbWorkload(*wname)
	if err != nil {
		return err
	}
	var srv []lbServer
	for _, s := range strings.Split(*servers, ",") {
		f := strings.Split(s, "@")
		if len(f) != 3 {
			return usagef("-servers: %q is not id@rpc@poll", s)
		}
		srv = append(srv, lbServer{ID: f[0], RPC: f[1], Poll: f[2]})
	}
	ids := make([]string, len(srv))
	byID := map[string]lbServer{}
	for i, s := range srv {
		ids[i] = s.ID
		byID[s.ID] = s
	}
	cfg := balance.DefaultConfig()
	cfg.PollSize, cfg.Discard, cfg.BroadcastInterval = *pollSize, *discard, *bcast
	proxied := *policy == "haproxy"
	if !proxied {
		cfg.Policy = *policy
	}
	oracle := cfg.Policy == balance.NameOracle
	insts := map[int]*lbInstance{}
	for i := *proc; i < *clients; i += *procs {
		p, err := balance.New(cfg, rand.New(rand.NewPCG(*seed, uint64(1000+i))))
		if err != nil {
			return err
		}
		in := &lbInstance{pol: p, outstanding: map[string]int{}}
		if in.poller, err = transport.NewPoller(slog.New(slog.DiscardHandler)); err != nil {
			return err
		}
		defer in.poller.Close()
		in.poller.OnLate(func(_ string, a transport.PollAnswer) {
			in.mu.Lock()
			in.pol.Report(time.Now(), balance.Load{Replica: a.Replica, Queue: a.Queue, RTT: a.RTT})
			in.mu.Unlock()
		})
		insts[i] = in
	}
	poller, err := transport.NewPoller(slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer poller.Close()
	conns := transport.NewConns()
	defer conns.Close()
	stubs := map[string]pb.NodeClient{}
	for _, s := range srv {
		if stubs[s.ID], err = conns.Client(s.RPC); err != nil {
			return err
		}
	}
	var proxy pb.NodeClient
	if proxied {
		if proxy, err = conns.Client(*target); err != nil {
			return err
		}
	}
	// Warm the connections up (zero work) so no request of the trace pays
	// for dialling.
	for _, s := range srv {
		warm, cancelWarm := context.WithTimeout(ctx, 5*time.Second)
		_, err := stubs[s.ID].Call(warm, &pb.CallRequest{Service: "work", Method: "work", Mode: pb.Mode(neptune.Read), Body: work.Encode(0)})
		cancelWarm()
		if err != nil {
			return fmt.Errorf("bench lb-client: warm up %s: %w", s.ID, err)
		}
	}
	trace := lbTrace(w, *load, *capacity, *scale, *clients, *duration, *seed)
	start := time.Unix(0, *startNano)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.Policy == balance.NameBroadcast {
		go lbPush(ctx, poller, srv, cfg.BroadcastInterval, *seed+uint64(*proc), insts)
	}

	var (
		mu  sync.Mutex
		res lbResult
		wg  sync.WaitGroup
	)
	record := func(at, lag, lat, poll time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			res.Errors++
			if res.FirstErr == "" {
				res.FirstErr = err.Error()
			}
			return
		}
		if at >= *warmup {
			res.Lat = append(res.Lat, int64(lat))
			res.Poll = append(res.Poll, int64(poll))
			res.Lag = append(res.Lag, int64(lag))
		}
	}
	one := func(r lbRequest, in *lbInstance) {
		defer wg.Done()
		t0 := time.Now()
		lag := t0.Sub(start.Add(r.at))
		req := &pb.CallRequest{Service: "work", Method: "work", Mode: pb.Mode(neptune.Read), Body: work.Encode(r.service)}
		callCtx, cancelCall := context.WithTimeout(ctx, 2*time.Minute)
		defer cancelCall()
		if proxied {
			_, err := proxy.Call(callCtx, req)
			record(r.at, lag, time.Since(t0), 0, err)
			return
		}
		in.mu.Lock()
		plan := in.pol.Plan(t0, ids)
		in.mu.Unlock()
		var loads []balance.Load
		if len(plan.Poll) > 0 {
			targets := make([]transport.PollTarget, len(plan.Poll))
			for i, id := range plan.Poll {
				targets[i] = transport.PollTarget{Replica: id, Addr: byID[id].Poll}
			}
			for _, a := range in.poller.PollFirst(callCtx, targets, "work", 0, "", plan.Wait, plan.Enough) {
				loads = append(loads, balance.Load{Replica: a.Replica, Queue: a.Queue, RTT: a.RTT})
			}
		}
		in.mu.Lock()
		now := time.Now()
		if oracle {
			for _, id := range ids {
				in.pol.Report(now, balance.Load{Replica: id, Queue: in.outstanding[id]})
			}
		}
		choice := in.pol.Choose(now, ids, loads)
		in.pol.Sent(now, choice)
		in.outstanding[choice]++
		in.mu.Unlock()
		poll := time.Since(t0)
		sent := time.Now()
		_, err := stubs[choice].Call(callCtx, req)
		in.mu.Lock()
		in.outstanding[choice]--
		in.pol.Done(time.Now(), choice, time.Since(sent))
		in.mu.Unlock()
		record(r.at, lag, time.Since(t0), poll, err)
	}
	for _, r := range trace {
		in, ok := insts[r.client]
		if !ok {
			continue
		}
		if d := time.Until(start.Add(r.at)); d > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d):
			}
		}
		wg.Add(1)
		go one(r, in)
	}
	wg.Wait()
	return json.NewEncoder(stdout).Encode(&res)
}

// lbPush emulates the broadcast policy's server pushes: each server's load
// is fetched (by a poll) at its own jittered interval of 0.5–1.5× the mean
// and reported to every instance of this process at once, as a push would.
func lbPush(ctx context.Context, poller *transport.Poller, srv []lbServer, mean time.Duration, seed uint64, insts map[int]*lbInstance) {
	for i, s := range srv {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Duration(float64(mean) * (0.5 + rng.Float64()))):
				}
				for _, a := range poller.Poll(ctx, []transport.PollTarget{{Replica: s.ID, Addr: s.Poll}}, "work", 0, "", mean) {
					now := time.Now()
					for _, in := range insts {
						in.mu.Lock()
						in.pol.Report(now, balance.Load{Replica: a.Replica, Queue: a.Queue})
						in.mu.Unlock()
					}
				}
			}
		}()
	}
}
