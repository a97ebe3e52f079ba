package neptune

import (
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/sched"
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
