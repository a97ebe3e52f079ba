// Package overhead is `neptune bench overhead`: what Neptune adds to a
// call, like against like. One node process hosting echo is compared with
// one raw gRPC echo server in its own process; two node processes hosting
// echo with gRPC's own round_robin over two raw servers. The two are called
// through neptune.Client with
// polling off, with the paper's poll-3 and with the default policy,
// sequentially and concurrently, in interleaved rounds. Two, because a
// call with one eligible replica skips the poll: with a single echo node
// every policy ran the same code and the "polling cost" was noise. The
// polling goal is the default policy's sequential mean at most PollGoal
// above polling off's. A second pair of node processes runs secured
// (mutual TLS, keyed gossip, authenticated polls) and is called the same
// way, so the cost of security is measured in the same run against the
// same plaintext rows: goal latency ≤ 1.1× and throughput ≥ 0.9×.
//
// The async policy (probes off the call path, issue 18 item 3) and push
// (nodes push their load to subscribed clients) have their own rows and
// printed polling cost beside the default's; the goal is judged on
// whichever policy is the default.
package overhead

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/localcluster"
	"github.com/neptune-cluster/neptune/lab/report"
)

// Config are the knobs of `neptune bench overhead`.
type Config struct {
	// Cell is the measuring time per contender per mode per round.
	Cell time.Duration
	// Rounds are interleaved.
	Rounds int
	// Payload is the request body in bytes.
	Payload int
	// Concurrency is the number of callers in the concurrent mode.
	Concurrency int
	// PollGoal is the most the default policy may add to a sequential
	// call's mean over polling off, with two eligible replicas.
	PollGoal time.Duration
}

// DefaultConfig is 3 rounds of 2 s cells of 1 KiB echoes, 64-way in the
// concurrent mode.
func DefaultConfig() Config {
	return Config{Cell: 2 * time.Second, Rounds: 3, Payload: 1024, Concurrency: 64, PollGoal: 50 * time.Microsecond}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if c.Cell <= 0 || c.Rounds < 1 || c.Payload < 0 || c.Concurrency < 1 || c.PollGoal <= 0 {
		return errors.New("overhead: cell and poll goal must be > 0, rounds and concurrency >= 1, payload >= 0")
	}
	return nil
}

// The baselines' rows and the one-replica row.
const (
	rawName = "raw gRPC"
	rrName  = "raw gRPC round_robin ×2"
	oneName = "neptune, 1 replica"
)

// baseline is the row a contender is compared with: like against like,
// one server against one, two against two.
func baseline(name string) string {
	switch name {
	case rawName, oneName:
		return rawName
	}
	return rrName
}

// roundRobin dials two raw echo servers through gRPC's own round_robin
// balancer, as a plain gRPC user balances two replicas.
func roundRobin(a, b string) (pb.NodeClient, func(), error) {
	r := manual.NewBuilderWithScheme("bench")
	r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: a}, {Addr: b}}})
	cc, err := grpc.NewClient("bench:///echo", append(transport.DialOptions(), grpc.WithResolvers(r),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`))...)
	if err != nil {
		return nil, nil, err
	}
	return pb.NewNodeClient(cc), func() { cc.Close() }, nil
}

// EchoServerVerb is the hidden `neptune bench` verb that runs EchoServer,
// and EchoServerLine what it prints when it is up, with its address.
const (
	EchoServerVerb = "echo-server"
	EchoServerLine = "raw echo up: %s\n"
)

// EchoServer is the baseline, the hidden `neptune bench echo-server`: a
// bare gRPC server answering the same Call RPC with its request body,
// nothing else, until ctx ends.
func EchoServer(ctx context.Context, stdout io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s := grpc.NewServer(transport.ServerOptions()...) // same transport settings as a node
	pb.RegisterNodeServer(s, rawEcho{})
	go func() { <-ctx.Done(); s.Stop() }()
	fmt.Fprintf(stdout, EchoServerLine, ln.Addr())
	return s.Serve(ln)
}

type rawEcho struct{ pb.UnimplementedNodeServer }

func (rawEcho) Call(_ context.Context, in *pb.CallRequest) (*pb.CallResponse, error) {
	return &pb.CallResponse{Body: in.Body}, nil
}

// Run is `neptune bench overhead`.
func Run(ctx context.Context, cfg Config, stdout io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	exe, dir, cleanup, err := localcluster.Scratch("neptune-bench-")
	if err != nil {
		return err
	}
	defer cleanup()

	// The baseline: a raw gRPC echo server in its own process.
	rawAddr, stopRaw, err := bench.StartHelper(ctx, exe, EchoServerLine, EchoServerVerb)
	if err != nil {
		return err
	}
	defer stopRaw()
	conns := transport.NewConns()
	defer conns.Close()
	// The raw echo server is the plaintext gRPC baseline, not a node: it
	// has no node id and no certificate to check.
	rawClient, err := conns.Client(rawAddr)
	if err != nil {
		return err
	}
	// Two raw servers behind gRPC's round_robin: the baseline of two
	// replicas.
	rawAddr2, stopRaw2, err := bench.StartHelper(ctx, exe, EchoServerLine, EchoServerVerb)
	if err != nil {
		return err
	}
	defer stopRaw2()
	rrClient, closeRR, err := roundRobin(rawAddr, rawAddr2)
	if err != nil {
		return err
	}
	defer closeRR()
	// One node process: the baseline of one raw server.
	if err := os.Mkdir(filepath.Join(dir, "single"), 0o755); err != nil {
		return err
	}
	single := localcluster.New(exe, filepath.Join(dir, "single"))
	defer single.Close()
	if _, err := single.Start(ctx, localcluster.Spec{ID: "bench0", Services: []string{"echo:0"}}); err != nil {
		return err
	}

	// Neptune: two node processes hosting echo, so a call has two
	// eligible replicas and a polling policy polls.
	cl := localcluster.New(exe, dir)
	defer cl.Close()
	node, err := cl.Start(ctx, localcluster.Spec{ID: "bench1", Services: []string{"echo:0"}})
	if err != nil {
		return err
	}
	if _, err := cl.Start(ctx, localcluster.Spec{ID: "bench3", Services: []string{"echo:0"}}); err != nil {
		return err
	}
	// The same, secured: its own cluster, so plaintext and mTLS clients
	// never share a node; two nodes too, so its default policy polls as
	// its plaintext twin does.
	scl, err := localcluster.NewSecure(exe, filepath.Join(dir, "secured"), "bench")
	if err != nil {
		return err
	}
	defer scl.Close()
	for _, id := range []string{"bench2", "bench4"} {
		if _, err := scl.Start(ctx, localcluster.Spec{ID: id, Services: []string{"echo:0"}}); err != nil {
			return err
		}
	}
	time.Sleep(500 * time.Millisecond)
	idleRSS, _ := localcluster.RSS(node.PID())

	dial := func(cl *localcluster.Cluster, policy string) (*neptune.Client, error) {
		c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: cl.Seeds(), Balance: neptune.Balancing{Policy: policy}, Security: cl.ClientSecurity("client/client")})
		if err != nil {
			return nil, err
		}
		return c, localcluster.WaitMembers(ctx, c, replicas, 10*time.Second)
	}
	def := balance.DefaultConfig().Policy
	one, err := neptune.Dial(ctx, neptune.ClientConfig{Join: single.Seeds(), Balance: neptune.Balancing{Policy: balance.NameRandom}, Security: single.ClientSecurity("client/client")})
	if err != nil {
		return err
	}
	defer one.Close()
	if err := localcluster.WaitMembers(ctx, one, 1, 10*time.Second); err != nil {
		return err
	}
	clients, secured := map[string]*neptune.Client{}, map[string]*neptune.Client{}
	for _, policy := range []string{balance.NameRandom, balance.NamePolling, def, balance.NameAsync, balance.NamePush} {
		if clients[policy] != nil {
			continue
		}
		c, err := dial(cl, policy)
		if err != nil {
			return err
		}
		defer c.Close()
		clients[policy] = c
	}
	for _, policy := range []string{balance.NameRandom, def} {
		if secured[policy] != nil {
			continue
		}
		c, err := dial(scl, policy)
		if err != nil {
			return err
		}
		defer c.Close()
		secured[policy] = c
	}

	viaNeptune := func(c *neptune.Client) func(context.Context, []byte) error {
		return func(ctx context.Context, b []byte) error {
			_, err := c.Call(ctx, "echo", 0, "echo", b)
			return err
		}
	}
	contenders := []bench.Contender{
		{Name: rawName, Call: func(ctx context.Context, b []byte) error {
			_, err := rawClient.Call(ctx, &pb.CallRequest{Service: "echo", Method: "echo", Body: b})
			return err
		}},
		{Name: rrName, Call: func(ctx context.Context, b []byte) error {
			_, err := rrClient.Call(ctx, &pb.CallRequest{Service: "echo", Method: "echo", Body: b})
			return err
		}},
		{Name: oneName, Call: viaNeptune(one)},
		{Name: "neptune, polling off", Call: viaNeptune(clients[balance.NameRandom])},
		{Name: "neptune, poll-3 (paper)", Call: viaNeptune(clients[balance.NamePolling])},
	}
	// defName is the default policy's row, judged against the polling
	// goal; when the default is the paper's poll-3 that row is it.
	defName := "neptune, poll-3 (paper)"
	if def != balance.NamePolling {
		defName = "neptune, default (" + def + ")"
		contenders = append(contenders, bench.Contender{Name: defName, Call: viaNeptune(clients[def])})
	}
	// asyncName is the async policy's row (probes off the call path,
	// issue 18), printed beside the default when it is not the default.
	asyncName := "neptune, default (" + balance.NameAsync + ")"
	if def != balance.NameAsync {
		asyncName = "neptune, async (probes)"
		contenders = append(contenders, bench.Contender{Name: asyncName, Call: viaNeptune(clients[balance.NameAsync])})
	}
	// pushName is the push policy's row (nodes push their load to the
	// subscribed client, issue 18), printed beside the default.
	pushName := "neptune, default (" + balance.NamePush + ")"
	if def != balance.NamePush {
		pushName = "neptune, push (pushed loads)"
		contenders = append(contenders, bench.Contender{Name: pushName, Call: viaNeptune(clients[balance.NamePush])})
	}
	// The security pairs: each mTLS row against its plaintext twin.
	pairs := []securityPair{{plain: "neptune, polling off", secure: "neptune+mTLS, polling off"}}
	contenders = append(contenders, bench.Contender{Name: pairs[0].secure, Call: viaNeptune(secured[balance.NameRandom])})
	if def != balance.NameRandom {
		plain := "neptune, default (" + def + ")"
		if def == balance.NamePolling {
			plain = "neptune, poll-3 (paper)"
		}
		pairs = append(pairs, securityPair{plain: plain, secure: "neptune+mTLS, default (" + def + ")"})
		contenders = append(contenders, bench.Contender{Name: pairs[1].secure, Call: viaNeptune(secured[def])})
	}
	body := make([]byte, cfg.Payload)
	modes := []int{1, cfg.Concurrency}
	results := map[string]*bench.Cell{}
	// perRound keeps each round's cells too, to see whether the verdict
	// holds round by round or only on the average.
	perRound := map[string][]*bench.Cell{}
	// starved is, per cell, the worst a probe saw over its rounds: the
	// client's wake-up lateness and the machine's CPU pressure, the
	// starvation flags of the sequential verdicts.
	starved := map[string]bench.Starvation{}
	var peakRSS atomic.Int64
	fmt.Fprintf(stdout, "bench overhead: %d B echo, %d echo replicas per cluster, %d interleaved rounds of %v per cell, sequential and %d-way concurrent\n",
		cfg.Payload, replicas, cfg.Rounds, cfg.Cell, cfg.Concurrency)
	for r := range cfg.Rounds {
		for _, conc := range modes {
			for _, c := range contenders {
				key := fmt.Sprintf("%s|%d", c.Name, conc)
				if results[key] == nil {
					results[key] = &bench.Cell{}
				}
				stop := make(chan struct{})
				go sampleRSS(node.PID(), &peakRSS, stop)
				round := &bench.Cell{}
				probe := bench.StartLagProbe(5 * time.Millisecond)
				err := bench.RunCell(ctx, c.Call, body, conc, cfg.Cell, round)
				starved[key] = starved[key].Worse(probe.Stop())
				close(stop)
				if err != nil {
					return fmt.Errorf("bench: %s (round %d): %w", c.Name, r+1, err)
				}
				results[key].Add(round)
				perRound[key] = append(perRound[key], round)
			}
		}
	}
	fmt.Fprintf(stdout, "\nlike against like: one replica against one raw gRPC server, two replicas (every other row) against gRPC's round_robin over two\n")
	fmt.Fprintf(stdout, "%-30s %5s %10s %9s %9s %9s %9s %9s  %s\n", "contender", "conc", "calls/s", "mean", "p50", "p99", "lat×base", "tput×base", "base")
	for _, conc := range modes {
		for _, c := range contenders {
			res := results[fmt.Sprintf("%s|%d", c.Name, conc)]
			base := results[fmt.Sprintf("%s|%d", baseline(c.Name), conc)]
			lat, baseLat := res.Latency(), base.Latency()
			fmt.Fprintf(stdout, "%-30s %5d %10.0f %9s %9s %9s %9.2f %9.2f  %s\n", c.Name, conc, res.Rate(), lat.Mean, lat.Fmt(lat.P50), lat.Fmt(lat.P99),
				float64(lat.Mean)/float64(baseLat.Mean), res.Rate()/base.Rate(), baseline(c.Name))
		}
	}
	// Polling's cost per sequential call, with two eligible replicas: each
	// polling row's mean minus polling off's, on the whole run and per
	// round. The goal is judged on the default policy (the product's
	// path); the paper's poll-3 is printed beside it.
	fmt.Fprintf(stdout, "\npolling cost per sequential call, %d eligible replicas (mean with polling − mean with polling off):\n", replicas)
	off := "neptune, polling off|1"
	for _, name := range slices.Compact([]string{"neptune, poll-3 (paper)", defName, asyncName, pushName}) {
		key := name + "|1"
		var rounds []time.Duration
		for r := range perRound[key] {
			rounds = append(rounds, perRound[key][r].Latency().Mean-perRound[off][r].Latency().Mean)
		}
		cost := results[key].Latency().Mean - results[off].Latency().Mean
		c := pollVerdict(strings.TrimPrefix(name, "neptune, "), cfg.PollGoal, cost, rounds, starved[key].Worse(starved[off]))
		if name != defName {
			fmt.Fprintf(stdout, "  (not judged) %s: %s\n", c.Goal, c.Measured)
			continue
		}
		fmt.Fprintf(stdout, "  %s\n", c)
	}
	fmt.Fprintf(stdout, "node resident memory: idle %.1f MiB, peak under load %.1f MiB\n", float64(idleRSS)/(1<<20), float64(peakRSS.Load())/(1<<20))
	securityVerdict(stdout, pairs, modes, results, perRound, starved)
	return nil
}

// replicas is the number of echo node processes per cluster: two, the
// fewest with which a call polls.
const replicas = 2

// pollVerdict judges "policy's sequential mean ≤ goal above polling
// off's" on the whole run's difference cost and each round's (rounds),
// INCONCLUSIVE when rounds disagree or either cell's client was starved
// or the machine was (starved, the worst either cell saw).
func pollVerdict(policy string, goal, cost time.Duration, rounds []time.Duration, starved bench.Starvation) *report.Check {
	var each []bool
	var rs []string
	for _, r := range rounds {
		each = append(each, r <= goal)
		rs = append(rs, r.Round(time.Microsecond).String())
	}
	c := &report.Check{Goal: fmt.Sprintf("%s polling ≤ %v per sequential call over polling off", policy, goal), Met: cost <= goal,
		Measured: fmt.Sprintf("%v (rounds: %s)", cost.Round(time.Microsecond), strings.Join(rs, ", "))}
	return starved.Doubt(report.Rounds(c, each), "these sequential cells")
}

// securityPair is an mTLS contender and its plaintext twin.
type securityPair struct{ plain, secure string }

// Goals of security's cost against plaintext.
const (
	maxLatencyRatio = 1.1
	minRateRatio    = 0.9
)

// securityVerdict prints mTLS ÷ plaintext for each pair and mode and a
// verdict on each: PASS when the goals hold on the whole run and in every
// round, FAIL when they fail on the whole run and in every round,
// INCONCLUSIVE when rounds disagree (the difference is within the run's
// noise) or, sequentially, when the client was starved in a cell of the
// pair (64-way, the client saturates its cores by design).
func securityVerdict(w io.Writer, pairs []securityPair, modes []int, all map[string]*bench.Cell, rounds map[string][]*bench.Cell, starved map[string]bench.Starvation) {
	fmt.Fprintf(w, "\nmTLS vs plaintext (goal: latency ≤ %.1f×, throughput ≥ %.1f×)\n", maxLatencyRatio, minRateRatio)
	fmt.Fprintf(w, "%-36s %5s %8s %8s\n", "pair", "conc", "lat×", "tput×")
	ok := func(p, s *bench.Cell) (float64, float64, bool) {
		lat := float64(s.Latency().Mean) / float64(p.Latency().Mean)
		rate := s.Rate() / p.Rate()
		return lat, rate, lat <= maxLatencyRatio && rate >= minRateRatio
	}
	var checks []*report.Check
	for _, pr := range pairs {
		for _, conc := range modes {
			pk, sk := fmt.Sprintf("%s|%d", pr.plain, conc), fmt.Sprintf("%s|%d", pr.secure, conc)
			lat, rate, good := ok(all[pk], all[sk])
			var each []bool
			for r := range rounds[pk] {
				_, _, g := ok(rounds[pk][r], rounds[sk][r])
				each = append(each, g)
			}
			fmt.Fprintf(w, "%-36s %5d %8.2f %8.2f\n", pr.secure, conc, lat, rate)
			c := report.Rounds(&report.Check{Goal: fmt.Sprintf("%s, %d-way", pr.secure, conc), Met: good, Measured: fmt.Sprintf("latency %.2f×, throughput %.2f×", lat, rate)}, each)
			if conc == 1 {
				starved[pk].Worse(starved[sk]).Doubt(c, "this pair's sequential cells")
			}
			checks = append(checks, c)
		}
	}
	for _, c := range checks {
		fmt.Fprintf(w, "  %s\n", c)
	}
	fmt.Fprintf(w, "security overhead verdicts: %s\n", report.Tally(checks...))
}

func sampleRSS(pid int, peak *atomic.Int64, stop <-chan struct{}) {
	for {
		if rss, err := localcluster.RSS(pid); err == nil && rss > peak.Load() {
			peak.Store(rss)
		}
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}
