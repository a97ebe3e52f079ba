// Package overhead is `neptune bench overhead`: what Neptune adds to a
// call. A raw gRPC echo server in its own process is the baseline; a node
// process hosting echo is called through neptune.Client with polling off,
// with the paper's poll-3 and with the default policy, sequentially and
// concurrently, in interleaved rounds.
package overhead

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/localcluster"
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
}

// DefaultConfig is 3 rounds of 2 s cells of 1 KiB echoes, 64-way in the
// concurrent mode.
func DefaultConfig() Config {
	return Config{Cell: 2 * time.Second, Rounds: 3, Payload: 1024, Concurrency: 64}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if c.Cell <= 0 || c.Rounds < 1 || c.Payload < 0 || c.Concurrency < 1 {
		return errors.New("overhead: cell must be > 0, rounds and concurrency >= 1, payload >= 0")
	}
	return nil
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
		c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: cl.Seeds(), Balance: neptune.Balancing{Policy: policy}})
		if err != nil {
			return nil, err
		}
		return c, localcluster.WaitMembers(ctx, c, 1, 10*time.Second)
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
			_, err := c.Call(ctx, "echo", 0, "echo", b)
			return err
		}
	}
	contenders := []bench.Contender{
		{Name: "raw gRPC", Call: func(ctx context.Context, b []byte) error {
			_, err := rawClient.Call(ctx, &pb.CallRequest{Service: "echo", Method: "echo", Body: b})
			return err
		}},
		{Name: "neptune, polling off", Call: viaNeptune(clients[balance.NameRandom])},
		{Name: "neptune, poll-3 (paper)", Call: viaNeptune(clients[balance.NamePolling])},
	}
	if def := balance.DefaultConfig().Policy; def != balance.NamePolling {
		contenders = append(contenders, bench.Contender{Name: "neptune, default (" + def + ")", Call: viaNeptune(clients[def])})
	}
	body := make([]byte, cfg.Payload)
	modes := []int{1, cfg.Concurrency}
	results := map[string]*bench.Cell{}
	var peakRSS atomic.Int64
	fmt.Fprintf(stdout, "bench overhead: %d B echo, %d interleaved rounds of %v per cell, sequential and %d-way concurrent\n", cfg.Payload, cfg.Rounds, cfg.Cell, cfg.Concurrency)
	for r := range cfg.Rounds {
		for _, conc := range modes {
			for _, c := range contenders {
				key := fmt.Sprintf("%s|%d", c.Name, conc)
				if results[key] == nil {
					results[key] = &bench.Cell{}
				}
				stop := make(chan struct{})
				go sampleRSS(node.PID(), &peakRSS, stop)
				err := bench.RunCell(ctx, c.Call, body, conc, cfg.Cell, results[key])
				close(stop)
				if err != nil {
					return fmt.Errorf("bench: %s (round %d): %w", c.Name, r+1, err)
				}
			}
		}
	}
	fmt.Fprintf(stdout, "\n%-30s %5s %10s %9s %9s %9s %8s %8s\n", "contender", "conc", "calls/s", "mean", "p50", "p99", "lat×raw", "tput×raw")
	for _, conc := range modes {
		base := results["raw gRPC|"+fmt.Sprint(conc)]
		baseLat := base.Latency()
		for _, c := range contenders {
			res := results[fmt.Sprintf("%s|%d", c.Name, conc)]
			lat := res.Latency()
			fmt.Fprintf(stdout, "%-30s %5d %10.0f %9s %9s %9s %8.2f %8.2f\n", c.Name, conc, res.Rate(), lat.Mean, lat.Fmt(lat.P50), lat.Fmt(lat.P99),
				float64(lat.Mean)/float64(baseLat.Mean), res.Rate()/base.Rate())
		}
	}
	seqPoll, seqDirect := results["neptune, poll-3 (paper)|1"].Latency(), results["neptune, polling off|1"].Latency()
	fmt.Fprintf(stdout, "\npolling cost (sequential, poll-3 on every call): %v per call (mean with polling − mean without)\n", seqPoll.Mean-seqDirect.Mean)
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
