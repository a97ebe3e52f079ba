package neptune_test

import (
	"context"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
)

// TestAggregateBlockingHoldsTheWorkerWhileWaiting: on a node with one
// worker hosting both partitions, the event-driven call covers both (the
// root waits for its child without a worker), while a Blocking call's root
// holds the only worker, so its child on the same node never runs and only
// the root's own partition arrives by the deadline: the NoED deadlock of
// DAC §5.4 in miniature.
func TestAggregateBlockingHoldsTheWorkerWhileWaiting(t *testing.T) {
	ctx := context.Background()
	nd, err := neptune.NewNode(neptune.NodeConfig{ID: "b0", AnnounceInterval: 100 * time.Millisecond, AnnounceTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	svc := sumService()
	svc.Workers = 1
	if err := nd.Register(svc, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := nd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	c := nd.Client()
	waitFor(t, 5*time.Second, func() bool { return len(c.Members(ctx, 50*time.Millisecond)) == 1 })
	for _, tc := range []struct {
		blocking bool
		want     int
	}{{false, 2}, {true, 1}, {false, 2}} {
		res, err := c.Aggregate(ctx, neptune.Aggregation{
			Service: "sum", Partitions: []int{0, 1}, Local: "work", Reduce: "sum", Quality: 0.5,
			Deadline: 400 * time.Millisecond, ReduceBudget: 20 * time.Millisecond, Scheme: neptune.SchemeFlat, Blocking: tc.blocking,
		})
		if err != nil {
			t.Fatalf("blocking=%v: %v", tc.blocking, err)
		}
		if len(res.Contributing) != tc.want {
			t.Fatalf("blocking=%v: contributing %v, want %d partitions", tc.blocking, res.Contributing, tc.want)
		}
	}
}
