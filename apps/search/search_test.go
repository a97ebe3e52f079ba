package search

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/dac/dactest"
)

var small = Config{Docs: 300, Vocab: 200, DocLen: 20, Seed: 7}

func TestMergeIsCommutativeAndAssociative(t *testing.T) {
	gen := func(r *rand.Rand) []Hit {
		hits := make([]Hit, r.IntN(8))
		for i := range hits {
			hits[i] = Hit{Doc: r.IntN(1 << 20), Score: float64(r.IntN(50)) / 4}
		}
		return best(hits, 5)
	}
	dactest.CheckReducer(t, func(a, b []Hit) ([]Hit, error) { return Merge(a, b, 5), nil }, gen, 500)
}

func TestTopKIsThePrefixOfAllMatches(t *testing.T) {
	ix := NewIndex(small, 3)
	q := Query{Terms: []int{1, 4, 9}, K: 10}
	all := ix.TopK(Query{Terms: q.Terms, K: 1 << 30})
	got := ix.TopK(q)
	if len(all) < 10 || !slices.Equal(got, all[:10]) {
		t.Fatalf("top 10 = %v, want the first 10 of %d matches", got, len(all))
	}
	for _, h := range all {
		if h.Doc < 3*small.Docs || h.Doc >= 4*small.Docs {
			t.Fatalf("doc %d is not in partition 3", h.Doc)
		}
	}
	if again := NewIndex(small, 3).TopK(q); !slices.Equal(again, got) {
		t.Error("the corpus is not reproducible from its seed")
	}
}

// TestAggregateEqualsMergedPartitions runs the service on two in-process
// nodes and checks the aggregated top-k against merging each partition's.
func TestAggregateEqualsMergedPartitions(t *testing.T) {
	ctx := context.Background()
	var nodes []*neptune.Node
	var join []string
	for i := range 2 {
		s, err := New(small)
		if err != nil {
			t.Fatal(err)
		}
		nd, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: fmt.Sprintf("s%d", i), Join: join, AnnounceInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := nd.Register(s.Service(), 2*i, 2*i+1); err != nil {
			t.Fatal(err)
		}
		if err := nd.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer nd.Close()
		nodes = append(nodes, nd)
		join = []string{nd.GossipAddr()}
	}
	q := Query{Terms: []int{2, 3, 17}, K: 8}
	var want []Hit
	for p := range 4 {
		want = Merge(want, NewIndex(small, p).TopK(q), q.K)
	}
	params, _ := json.Marshal(q)
	c := nodes[0].Client()
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		res, err := c.Aggregate(ctx, neptune.Aggregation{
			Service: Name, Partitions: []int{0, 1, 2, 3}, Local: LocalOp, Reduce: ReduceOp,
			LocalParams: params, ReduceParams: []byte("8"), Deadline: 2 * time.Second,
		})
		if err == nil {
			var got []Hit
			if err := json.Unmarshal(res.Data, &got); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("aggregated %v, want %v", got, want)
			}
			return
		}
		if time.Since(start) > 5*time.Second { // until gossip has both nodes
			t.Fatal(err)
		}
	}
}
