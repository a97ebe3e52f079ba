package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/localcluster"
	"github.com/neptune-cluster/neptune/internal/replica/wal/walbench"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// benchmarks are the `neptune bench` verbs; each runs its contenders side
// by side in one run and prints ratios.
var benchmarks = map[string]func(context.Context, []string, io.Writer) error{
	"overhead":    benchOverhead,
	"lb":          benchLB,
	"replication": benchReplication,
	"wal":         walbench.Main,
	"dac":         benchDAC,
	"apps":        benchApps,
}

// helperProcesses are hidden verbs the benchmarks re-execute the binary with.
var helperProcesses = map[string]func(context.Context, []string, io.Writer) error{
	"echo-server":  rawEchoServer,
	"http-program": httpProgram,
	"lb-client":    benchLBClient,
}

func benchNames() string {
	names := make([]string, 0, len(benchmarks))
	for n := range benchmarks {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usagef("bench needs a name: %s", benchNames())
	}
	if run := benchmarks[args[0]]; run != nil {
		return run(ctx, args[1:], stdout)
	}
	if run := helperProcesses[args[0]]; run != nil {
		return run(ctx, args[1:], stdout)
	}
	return usagef("unknown benchmark %q (have: %s)", args[0], benchNames())
}

// rawEchoServer is the baseline of `bench overhead`: a bare gRPC server
// answering the same Call RPC with its request body, nothing else.
func rawEchoServer(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("bench echo-server", "")
	if err := parse(fs, args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s := grpc.NewServer(transport.ServerOptions()...) // same transport settings as a node
	pb.RegisterNodeServer(s, rawEcho{})
	go func() { <-ctx.Done(); s.Stop() }()
	fmt.Fprintf(stdout, "raw echo up: %s\n", ln.Addr())
	return s.Serve(ln)
}

// startHelper starts `neptune bench <args>` and returns the address it
// announces with format, and a function that kills it.
func startHelper(ctx context.Context, exe, format string, args ...string) (string, func(), error) {
	cmd := exec.CommandContext(ctx, exe, append([]string{"bench"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	var addr string
	if _, err := fmt.Fscanf(out, format, &addr); err != nil {
		stop()
		return "", nil, fmt.Errorf("bench: helper %s did not start: %w", args[0], err)
	}
	return addr, stop, nil
}

type rawEcho struct{ pb.UnimplementedNodeServer }

func (rawEcho) Call(_ context.Context, in *pb.CallRequest) (*pb.CallResponse, error) {
	return &pb.CallResponse{Body: in.Body}, nil
}

// contender is one way of making an echo call.
type contender struct {
	name string
	call func(ctx context.Context, body []byte) error
}

func benchOverhead(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("bench overhead", "[-cell 2s] [-rounds 3] [-payload 1024] [-concurrency 64]")
	var (
		cell        = fs.Duration("cell", 2*time.Second, "measuring time per contender per mode per round")
		rounds      = fs.Int("rounds", 3, "interleaved rounds")
		payload     = fs.Int("payload", 1024, "request body bytes")
		concurrency = fs.Int("concurrency", 64, "callers in the concurrent mode")
	)
	if err := parse(fs, args); err != nil {
		return err
	}
	exe, dir, cleanup, err := scratch("neptune-bench-")
	if err != nil {
		return err
	}
	defer cleanup()

	// The baseline: a raw gRPC echo server in its own process.
	rawAddr, stopRaw, err := startHelper(ctx, exe, "raw echo up: %s\n", "echo-server")
	if err != nil {
		return err
	}
	defer stopRaw()
	conns := transport.NewConns()
	defer conns.Close()
	rawClient, err := conns.Client(rawAddr)
	if err != nil {
		return err
	}

	// Neptune: one node process hosting echo.
	cl := localcluster.New(exe, dir)
	defer cl.Close()
	node, err := cl.Start(ctx, localcluster.Spec{ID: "bench1", Services: []string{"echo:0"}})
	if err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond)
	idleRSS, _ := localcluster.RSS(node.PID())

	dial := func(policy string) (*neptune.Client, error) {
		b := balance.DefaultConfig()
		b.Policy = policy
		c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: cl.Seeds(), Balance: b})
		if err != nil {
			return nil, err
		}
		return c, waitMembers(ctx, c, 1, 10*time.Second)
	}
	clients := map[string]*neptune.Client{}
	for _, policy := range []string{balance.NameRandom, balance.NamePolling, balance.DefaultConfig().Policy} {
		if clients[policy] != nil {
			continue
		}
		c, err := dial(policy)
		if err != nil {
			return err
		}
		defer c.Close()
		clients[policy] = c
	}

	viaNeptune := func(c *neptune.Client) func(context.Context, []byte) error {
		return func(ctx context.Context, b []byte) error {
			_, err := c.Call(ctx, nil, "echo", 0, "echo", neptune.Read, b)
			return err
		}
	}
	contenders := []contender{
		{"raw gRPC", func(ctx context.Context, b []byte) error {
			_, err := rawClient.Call(ctx, &pb.CallRequest{Service: "echo", Method: "echo", Body: b})
			return err
		}},
		{"neptune, polling off", viaNeptune(clients[balance.NameRandom])},
		{"neptune, poll-3 (paper)", viaNeptune(clients[balance.NamePolling])},
	}
	if def := balance.DefaultConfig().Policy; def != balance.NamePolling {
		contenders = append(contenders, contender{"neptune, default (" + def + ")", viaNeptune(clients[def])})
	}
	body := make([]byte, *payload)
	modes := []int{1, *concurrency}
	results := map[string]*cellResult{}
	var peakRSS atomic.Int64
	fmt.Fprintf(stdout, "bench overhead: %d B echo, %d interleaved rounds of %v per cell, sequential and %d-way concurrent\n", *payload, *rounds, *cell, *concurrency)
	for r := range *rounds {
		for _, conc := range modes {
			for _, c := range contenders {
				key := fmt.Sprintf("%s|%d", c.name, conc)
				if results[key] == nil {
					results[key] = &cellResult{}
				}
				stop := make(chan struct{})
				go sampleRSS(node.PID(), &peakRSS, stop)
				err := runCell(ctx, c.call, body, conc, *cell, results[key])
				close(stop)
				if err != nil {
					return fmt.Errorf("bench: %s (round %d): %w", c.name, r+1, err)
				}
			}
		}
	}
	fmt.Fprintf(stdout, "\n%-30s %5s %10s %9s %9s %9s %8s %8s\n", "contender", "conc", "calls/s", "mean", "p50", "p99", "lat×raw", "tput×raw")
	for _, conc := range modes {
		base := results["raw gRPC|"+fmt.Sprint(conc)]
		for _, c := range contenders {
			res := results[fmt.Sprintf("%s|%d", c.name, conc)]
			fmt.Fprintf(stdout, "%-30s %5d %10.0f %9s %9s %9s %8.2f %8.2f\n", c.name, conc, res.rate(), res.mean(), res.pct(0.5), res.pct(0.99),
				float64(res.mean())/float64(base.mean()), res.rate()/base.rate())
		}
	}
	seqPoll, seqDirect := results["neptune, poll-3 (paper)|1"], results["neptune, polling off|1"]
	fmt.Fprintf(stdout, "\npolling cost (sequential, poll-3 on every call): %v per call (mean with polling − mean without)\n", seqPoll.mean()-seqDirect.mean())
	fmt.Fprintf(stdout, "node resident memory: idle %.1f MiB, peak under load %.1f MiB\n", float64(idleRSS)/(1<<20), float64(peakRSS.Load())/(1<<20))
	return nil
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

// cellResult accumulates one contender's calls in one mode over rounds.
type cellResult struct {
	mu      sync.Mutex
	lats    []time.Duration
	elapsed time.Duration
}

func (c *cellResult) rate() float64 { return float64(len(c.lats)) / c.elapsed.Seconds() }

func (c *cellResult) mean() time.Duration {
	var sum time.Duration
	for _, l := range c.lats {
		sum += l
	}
	return sum / time.Duration(max(len(c.lats), 1))
}

func (c *cellResult) pct(q float64) string {
	s := slices.Clone(c.lats)
	slices.Sort(s)
	return pct(s, q)
}

// runCell drives conc callers for d and appends their latencies to res.
func runCell(ctx context.Context, call func(context.Context, []byte) error, body []byte, conc int, d time.Duration, res *cellResult) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	start := time.Now()
	end := start.Add(d)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []time.Duration
			for ctx.Err() == nil {
				t0 := time.Now()
				err := call(ctx, body)
				// The server's copy of the deadline can fire a moment
				// before ours: an error at the very end is the cell ending.
				if ctx.Err() != nil || (err != nil && time.Until(end) < 10*time.Millisecond) {
					break
				}
				if err != nil {
					once.Do(func() { firstErr = err })
					cancel()
					break
				}
				local = append(local, time.Since(t0))
			}
			res.mu.Lock()
			res.lats = append(res.lats, local...)
			res.mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed += time.Since(start)
	if firstErr != nil && !strings.Contains(firstErr.Error(), "context") {
		return firstErr
	}
	return nil
}
