package client

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/security"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// nameNode answers every call with its own id.
type nameNode struct {
	pb.UnimplementedNodeServer
	id string
}

func (n *nameNode) Call(context.Context, *pb.CallRequest) (*pb.CallResponse, error) {
	return &pb.CallResponse{Body: []byte(n.id)}, nil
}

// fakeNode starts id's gRPC server, a poll server that answers queue once
// open is called (until then it holds every poll), and its gossip member
// announcing a readable partition 0 of "work" and of "pcache".
func fakeNode(t *testing.T, ctx context.Context, id string, queue int, join []string) (gossip string, open func()) {
	t.Helper()
	srv := grpc.NewServer()
	pb.RegisterNodeServer(srv, &nameNode{id: id})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	gate := make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(gate) }) }
	ps, err := transport.ListenPoll("127.0.0.1:0", func(string, int32, string) (int, bool) { <-gate; return queue, true }, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { open(); ps.Close() })
	g, err := membership.Start(ctx, membership.Config{NodeID: id, BindAddr: "127.0.0.1", Join: join, AnnounceInterval: 50 * time.Millisecond, TTL: 5 * time.Second,
		Announce: func() *pb.Announcement {
			get := []*pb.MethodInfo{{Name: "get", Mode: pb.Mode_MODE_READ}}
			return &pb.Announcement{RpcAddr: ln.Addr().String(), PollAddr: ps.Addr(), Services: []*pb.HostedService{
				{Name: "work", Partitions: []int32{0}, Methods: get}, {Name: "pcache", Partitions: []int32{0}, Methods: get}}}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g.Addr(), open
}

// TestAsyncCallsNeverWaitForProbes: under the async policy a call goes
// out while every probe is still unanswered, where the paper's polling
// waits for its polls (the control, which must miss its deadline); once
// the probes are answered, later calls follow the pooled answers.
func TestAsyncCallsNeverWaitForProbes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seed, openA := fakeNode(t, ctx, "a", 9, nil)
	_, openB := fakeNode(t, ctx, "b", 0, []string{seed})
	insecure, err := security.Load(security.Config{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	dial := func(cfg balance.Config) *Client {
		c, err := New(ctx, Config{Client: config.Client{Join: []string{seed}, Balance: cfg}, Material: insecure})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		for c.gossip.Lookup("work", 0, "get").Replicas == nil || len(c.gossip.Lookup("work", 0, "get").Replicas) < 2 {
			select {
			case <-ctx.Done():
				t.Fatal("the client never saw both nodes")
			case <-time.After(10 * time.Millisecond):
			}
		}
		return c
	}
	async := balance.DefaultConfig()
	async.Policy, async.ProbeAge, async.ProbeReuse = balance.NameAsync, time.Minute, 1000
	ca := dial(async)
	paper := balance.DefaultConfig()
	paper.Policy, paper.Discard = balance.NamePolling, time.Minute
	cs := dial(paper)

	call := func(c *Client, d time.Duration) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		resp, err := c.Call(cctx, "work", 0, "get", nil)
		if err != nil {
			return "", err
		}
		return string(resp.Body), nil
	}
	// Every poll is held: the async call goes out at once, the synchronous
	// one waits for its polls until its deadline.
	for range 3 {
		if _, err := call(ca, 10*time.Second); err != nil {
			t.Fatalf("async call with every probe unanswered: %v", err)
		}
	}
	if _, err := call(cs, 300*time.Millisecond); err == nil {
		t.Fatal("control: a polling call with its polls held succeeded, want it to miss its deadline waiting")
	}
	// Answers arrive (a: 9 in flight, b: 0) and reach the pool: calls
	// then go to b, every one of them. Before both answers are in, a call
	// falls back to its own in-flight counts (here a coin toss) or follows
	// a's lone answer, so a streak of 20 is the pool at work: by chance,
	// within 200 calls, it has odds of about 1 in 10,000.
	openA()
	openB()
	streak := 0
	for i := 0; streak < 20; i++ {
		if i == 200 {
			t.Fatal("200 calls after the answers, and never 20 in a row to b (RIF 0 against 9)")
		}
		got, err := call(ca, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got == "b" {
			streak++
		} else {
			streak = 0
		}
	}
}
