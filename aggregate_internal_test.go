package neptune

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/sched"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

func TestReduceFirstServesReductionsBeforeLocalWork(t *testing.T) {
	now := time.Unix(0, 0)
	s := withReduceFirst(Service{Aggregate: &Aggregator{}}, sched.NewFIFO())
	local1 := &sched.Request{Class: "", Arrival: now}
	reduce := &sched.Request{Class: reduceClass, Arrival: now.Add(time.Second)}
	local2 := &sched.Request{Class: "gold", Arrival: now.Add(2 * time.Second)}
	expired := &sched.Request{Class: reduceClass, Arrival: now, Deadline: now.Add(time.Millisecond)}
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
	if _, ok := withReduceFirst(Service{}, sched.NewFIFO()).(*sched.FIFO); !ok {
		t.Error("a service without aggregation operators should keep its scheduler")
	}
}

func TestHedgeBudgetAndDelay(t *testing.T) {
	var s aggState
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

// TestPollsReportCommittedAggregationWork: while a node waits for a
// child, its load index counts the reduction it owes (§4.5), which its
// queue length does not; once the call ends, the ledger is back at 0.
func TestPollsReportCommittedAggregationWork(t *testing.T) {
	release := make(chan struct{})
	agg := &Aggregator{
		Local: map[string]LocalFunc{"work": func(ctx context.Context, p int, _ []byte) ([]byte, error) {
			if p == 1 {
				select { // partition 1 is slow while release is open
				case <-release:
				case <-ctx.Done():
				}
			}
			time.Sleep(2 * time.Millisecond)
			return []byte{1}, nil
		}},
		Reduce: map[string]ReduceFunc{"first": func(_ context.Context, a, _ []byte, _ []byte) ([]byte, error) {
			time.Sleep(time.Millisecond)
			return a, nil
		}},
	}
	ctx := context.Background()
	var nodes []*Node
	for i := range 2 {
		nd, err := NewNode(NodeConfig{ID: fmt.Sprint("w", i), AnnounceInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := nd.Register(Service{Name: "agg", Workers: 3, Aggregate: agg}, i); err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			nd.cfg.Join = []string{nodes[0].GossipAddr()}
		}
		if err := nd.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes = append(nodes, nd)
	}
	call := func() error {
		_, err := nodes[0].Client().Aggregate(ctx, Aggregation{Service: "agg", Partitions: []int{0, 1}, Local: "work", Reduce: "first",
			Deadline: 5 * time.Second, Scheme: SchemeFlat})
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(nodes[0].Client().gossip.Replicas("agg", 1).Replicas) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("partition 1 never appeared in the yellow pages")
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(release)
	measured := func(nd *Node) bool { _, reduce := nd.services["agg"].ledger.Means(); return reduce > 0 }
	for !measured(nodes[0]) || !measured(nodes[1]) { // Flat's random roots measure a on both nodes
		if time.Now().After(deadline) {
			t.Fatal("a node never measured a reduction")
		}
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	release = make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- call() }()
	var owing bool
	for !owing && time.Now().Before(deadline) {
		for _, nd := range nodes {
			w, ok := nd.aggWork("agg")
			if !ok || w.Capacity != 3 {
				t.Fatalf("aggWork = %+v, %v; want capacity 3", w, ok)
			}
			// More than the work in its queue: a reduction it owes.
			local, reduce := nd.services["agg"].ledger.Means()
			queued := time.Duration(nd.services["agg"].pool.Load()) * local
			owing = owing || reduce > 0 && w.Pending >= queued+reduce
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !owing {
		t.Fatal("no node's load index counted the reduction it owed while waiting for its child")
	}
	for _, nd := range nodes {
		if w, _ := nd.aggWork("agg"); w.Pending != 0 {
			t.Errorf("%s: pending %v after the call ended, want 0", nd.cfg.ID, w.Pending)
		}
	}
	if _, ok := nodes[0].aggWork("nope"); ok {
		t.Error("aggWork answered for a service the node does not host")
	}
}

// TestSilentNodesRankBehindLateOnes: an unanswered poll ranks behind every
// answer, and a node silent for long behind one that answered the last
// call, so LAT makes the stopped node the leaf when many polls are late.
func TestSilentNodesRankBehindLateOnes(t *testing.T) {
	var s aggState
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
