package node

import (
	"context"
	"encoding/binary"
	"fmt"
	"github.com/neptune-cluster/neptune/internal/config"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/aggregation"
	"github.com/neptune-cluster/neptune/internal/service"
)

// startNodes starts n in-process nodes named prefix0..., lets register
// host their services, and waits until the first sees every one.
func startNodes(t *testing.T, n int, prefix string, register func(nd *Node, i int) error) []*Node {
	t.Helper()
	ctx := context.Background()
	var nodes []*Node
	var join []string
	for i := range n {
		nd, err := New(Config{Node: config.Node{Security: config.Security{Insecure: true}, ID: fmt.Sprint(prefix, i), Join: join, AnnounceInterval: 100 * time.Millisecond, AnnounceTTL: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		if err := register(nd, i); err != nil {
			t.Fatal(err)
		}
		if err := nd.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes = append(nodes, nd)
		join = []string{nodes[0].GossipAddr()}
	}
	waitFor(t, 10*time.Second, func() bool { return len(nodes[0].Client().Members(ctx, 50*time.Millisecond)) == n })
	return nodes
}

func waitFor(t *testing.T, limit time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sumService's partition p contributes p+1 after local; reductions add.
func sumService(workers int, local time.Duration) service.Service {
	enc := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	return service.Service{Name: "sum", Workers: workers, Aggregate: &service.Aggregator{
		Local: map[string]service.LocalFunc{"work": func(ctx context.Context, p int, _ []byte) ([]byte, error) {
			time.Sleep(local)
			return enc(uint64(p) + 1), nil
		}},
		Reduce: map[string]service.ReduceFunc{"sum": func(_ context.Context, a, b, _ []byte) ([]byte, error) {
			return enc(binary.BigEndian.Uint64(a) + binary.BigEndian.Uint64(b)), nil
		}},
	}}
}

// TestAggregateBlockingHoldsTheWorkerWhileWaiting: on a node with one
// worker hosting both partitions, the event-driven call covers both (the
// root waits for its child without a worker), while a Blocking call's root
// holds the only worker, so its child on the same node never runs and only
// the root's own partition arrives by the deadline: the NoED deadlock of
// DAC §5.4 in miniature. Blocking is an experiment's baseline, reachable
// through the internal client only.
func TestAggregateBlockingHoldsTheWorkerWhileWaiting(t *testing.T) {
	nodes := startNodes(t, 1, "b", func(nd *Node, _ int) error { return nd.Register(sumService(1, time.Millisecond), 0, 1) })
	c := nodes[0].Client()
	for _, tc := range []struct {
		blocking bool
		want     int
	}{{false, 2}, {true, 1}, {false, 2}} {
		res, err := c.Aggregate(context.Background(), aggregation.Aggregation{
			Service: "sum", Partitions: []int{0, 1}, Local: "work", Reduce: "sum", Quality: 0.5,
			Deadline: 400 * time.Millisecond, ReduceBudget: 20 * time.Millisecond, Scheme: aggregation.SchemeFlat,
		}, aggregation.Experiment{Blocking: tc.blocking})
		if err != nil {
			t.Fatalf("blocking=%v: %v", tc.blocking, err)
		}
		if len(res.Contributing) != tc.want {
			t.Fatalf("blocking=%v: contributing %v, want %d partitions", tc.blocking, res.Contributing, tc.want)
		}
	}
}

// TestPollsReportCommittedAggregationWork: while a node waits for a
// child, its load index counts the reduction it owes (§4.5), which its
// queue length does not; once the call ends, the ledger is back at 0.
func TestPollsReportCommittedAggregationWork(t *testing.T) {
	release := make(chan struct{})
	agg := &service.Aggregator{
		Local: map[string]service.LocalFunc{"work": func(ctx context.Context, p int, _ []byte) ([]byte, error) {
			if p == 1 {
				select { // partition 1 is slow while release is open
				case <-release:
				case <-ctx.Done():
				}
			}
			time.Sleep(2 * time.Millisecond)
			return []byte{1}, nil
		}},
		Reduce: map[string]service.ReduceFunc{"first": func(_ context.Context, a, _ []byte, _ []byte) ([]byte, error) {
			time.Sleep(time.Millisecond)
			return a, nil
		}},
	}
	ctx := context.Background()
	nodes := startNodes(t, 2, "w", func(nd *Node, i int) error {
		return nd.Register(service.Service{Name: "agg", Workers: 3, Aggregate: agg}, i)
	})
	call := func() error {
		_, err := nodes[0].Client().Aggregate(ctx, aggregation.Aggregation{Service: "agg", Partitions: []int{0, 1}, Local: "work", Reduce: "first",
			Deadline: 5 * time.Second, Scheme: aggregation.SchemeFlat}, aggregation.Experiment{})
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(nodes[0].Client().Gossip().Replicas("agg", 1).Replicas) == 0 {
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
