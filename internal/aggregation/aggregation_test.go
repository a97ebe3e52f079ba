package aggregation

import (
	"context"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/sched"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

func TestReduceFirstServesReductionsBeforeLocalWork(t *testing.T) {
	now := time.Unix(0, 0)
	s := WithReduceFirst(&service.Service{Aggregate: &service.Aggregator{}}, sched.NewFIFO())
	local1 := &sched.Request{Class: "", Arrival: now}
	reduce := &sched.Request{Class: ReduceClass, Arrival: now.Add(time.Second)}
	local2 := &sched.Request{Class: "gold", Arrival: now.Add(2 * time.Second)}
	expired := &sched.Request{Class: ReduceClass, Arrival: now, Deadline: now.Add(time.Millisecond)}
	for _, r := range []*sched.Request{local1, expired, reduce, local2} {
		s.Push(now, r)
	}
	if s.Len() != 4 {
		t.Fatalf("Len = %d, want 4", s.Len())
	}
	later := now.Add(time.Hour)
	next, dropped := s.Pop(later)
	if next != reduce || len(dropped) != 1 || dropped[0] != expired {
		t.Fatalf("first pop = %+v dropping %v, want the live reduction, dropping the expired one", next, dropped)
	}
	for _, want := range []*sched.Request{local1, local2} {
		if next, _ := s.Pop(later); next != want {
			t.Fatalf("pop = %+v, want %+v", next, want)
		}
	}
	if _, ok := WithReduceFirst(&service.Service{}, sched.NewFIFO()).(*sched.FIFO); !ok {
		t.Error("a service without aggregation operators should keep its scheduler")
	}
}

func TestHedgeBudgetAndDelay(t *testing.T) {
	var s state
	if _, _, ok := s.hedgeDelay("svc"); ok {
		t.Fatal("hedge delay known without samples")
	}
	for i := range 100 {
		s.leafDone("svc", time.Duration(i+1)*time.Millisecond)
	}
	after, typical, ok := s.hedgeDelay("svc")
	if !ok || after != 96*time.Millisecond || typical != 51*time.Millisecond {
		t.Fatalf("hedgeDelay = %v, %v, %v; want p95 96ms, median 51ms", after, typical, ok)
	}
	hedges := 0
	for s.takeHedge() {
		hedges++
	}
	if hedges != 5 { // 100 leaves earn 5 hedges
		t.Fatalf("%d hedges after 100 leaf calls, want 5", hedges)
	}
}

func TestSubtreeCollectsDescendants(t *testing.T) {
	p := func(i, parent int32) *pb.Participant { return &pb.Participant{Index: i, Parent: parent} }
	all := []*pb.Participant{p(0, -1), p(1, 0), p(2, 0), p(3, 1), p(4, 3), p(5, 2)}
	byParent := map[int32][]*pb.Participant{}
	for _, x := range all[1:] {
		byParent[x.Parent] = append(byParent[x.Parent], x)
	}
	var got []int32
	for _, x := range subtree(byParent, all[1]) {
		got = append(got, x.Index)
	}
	if len(got) != 3 || got[0] != 1 || got[1] != 3 || got[2] != 4 {
		t.Fatalf("subtree of 1 = %v, want [1 3 4]", got)
	}
}

// TestSilentNodesRankBehindLateOnes: an unanswered poll ranks behind every
// answer, and a node silent for long behind one that answered the last
// call, so LAT makes the stopped node the leaf when many polls are late.
func TestSilentNodesRankBehindLateOnes(t *testing.T) {
	var s state
	t0 := time.Unix(100, 0)
	ans := func(ids ...string) map[string]transport.PollAnswer {
		m := map[string]transport.PollAnswer{}
		for _, id := range ids {
			m[id] = transport.PollAnswer{Replica: id, Work: transport.Work{Pending: time.Second, Capacity: 2}}
		}
		return m
	}
	s.polled(t0, []string{"busy", "late", "stopped", "mute"}, ans("busy", "late", "stopped"))
	s.polled(t0.Add(time.Second), []string{"busy", "late", "mute"}, ans("busy", "late"))
	now := ans("busy")
	silent := s.polled(t0.Add(time.Second+20*time.Millisecond), []string{"busy", "late", "stopped", "mute", "new"}, now)
	want := map[string]time.Duration{"late": 20 * time.Millisecond, "stopped": 1020 * time.Millisecond, "mute": 1020 * time.Millisecond, "new": 0}
	if !maps.Equal(silent, want) {
		t.Fatalf("silent = %v, want %v (a node never heard from is silent since its first poll)", silent, want)
	}
	const T, local, reduce = 2 * time.Second, 25 * time.Millisecond, 5 * time.Millisecond
	load := func(id string) time.Duration {
		a, ok := now[id]
		return probe{answer: a, answered: ok, silent: silent[id]}.server(local, reduce, T).Load
	}
	if !(load("busy") < load("new") && load("new") < load("late") && load("late") < load("stopped")) {
		t.Fatalf("loads busy %v new %v late %v stopped %v: want increasing", load("busy"), load("new"), load("late"), load("stopped"))
	}
	if got := load("busy"); got != time.Second/2 {
		t.Fatalf("busy load = %v, want pending / capacity = 500ms", got)
	}
}

// nodes answers Aggregate calls by address: "slow" never answers (until
// the call is cancelled), any other answers at once.
type nodes struct{ calls map[string]*atomic.Int32 }

func (n nodes) ClientFor(_, addr string) (pb.NodeClient, error) {
	return node{addr: addr, calls: n.calls[addr]}, nil
}

type node struct {
	pb.NodeClient
	addr  string
	calls *atomic.Int32
}

func (n node) Aggregate(ctx context.Context, in *pb.AggregateRequest, _ ...grpc.CallOption) (*pb.AggregateResponse, error) {
	n.calls.Add(1)
	if n.addr == "slow" {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &pb.AggregateResponse{Partitions: []int32{0}, Data: []byte{1}}, nil
}

// TestHedgeFiresAtTheRecentP95OnTheClock: a leaf whose replica does not
// answer is re-issued to the next replica once the clock passes the recent
// leaf p95 (96 ms here), not before, however long the test runs.
func TestHedgeFiresAtTheRecentP95OnTheClock(t *testing.T) {
	clk := clock.NewManual(time.Unix(1000, 0))
	calls := map[string]*atomic.Int32{"slow": {}, "fast": {}}
	dir := pages{0: {{Node: "n1", RPCAddr: "slow"}, {Node: "n2", RPCAddr: "fast"}}}
	c := NewCaller(Config{Directory: dir, Dialer: nodes{calls}, Clock: clk})
	for i := range 100 {
		c.st.leafDone("svc", time.Duration(i+1)*time.Millisecond)
	}
	target := &pb.Participant{Index: 0, Partition: 0, Parent: -1, DeadlineNs: int64(time.Second),
		Replicas: []*pb.ReplicaAddr{{Node: "n1", RpcAddr: "slow"}, {Node: "n2", RpcAddr: "fast"}}}
	base := &pb.AggregateRequest{Service: "svc", Hedge: true, GraceNs: int64(10 * time.Millisecond)}
	type result struct {
		resp *pb.AggregateResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := c.child(context.Background(), clk.Now(), base, target, []*pb.Participant{target}, 10*time.Millisecond)
		done <- result{resp, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := clk.BlockUntilContext(ctx, 2); err != nil { // the call's deadline and the hedge timer
		t.Fatal(err)
	}
	clk.Advance(95 * time.Millisecond)
	if n := calls["fast"].Load(); n != 0 {
		t.Fatalf("hedged after 95ms, before the p95 of 96ms")
	}
	clk.Advance(time.Millisecond)
	select {
	case r := <-done:
		if r.err != nil || r.resp.Hedges != 1 || calls["fast"].Load() != 1 {
			t.Fatalf("hedged leaf: %+v, %v; fast called %d times; want its answer with one hedge", r.resp, r.err, calls["fast"].Load())
		}
	case <-ctx.Done():
		t.Fatal("no answer after the hedge delay")
	}
}
