package clustertest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/micro"
)

// TestAggregatePausedNodeOnRealProcesses runs four node processes hosting
// two micro partitions each and SIGSTOPs one: aggregations return by about
// the deadline without exactly that node's partitions, with the right
// coverage, and fail cleanly with ErrBelowQuality when ρ asks for more.
func TestAggregatePausedNodeOnRealProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nodes, c := microProcs(t, ctx)

	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	const deadline = time.Second
	agg := func(scheme neptune.Scheme, quality float64) (*neptune.AggregateResult, time.Duration, error) {
		start := time.Now()
		res, err := c.Aggregate(ctx, neptune.Aggregation{
			Service: "micro", Partitions: all, Local: micro.LocalOp, Reduce: micro.ReduceOp,
			LocalParams: micro.Params(5 * time.Millisecond), ReduceParams: micro.Params(time.Millisecond),
			Quality: quality, Deadline: deadline, Scheme: scheme, ReduceBudget: 50 * time.Millisecond,
		})
		return res, time.Since(start), err
	}
	check := func(res *neptune.AggregateResult, want []int) {
		t.Helper()
		got, _ := micro.Decode(res.Data)
		if !slices.Equal(res.Contributing, want) || got != sumOf(want) || res.Coverage != float64(len(want))/float64(len(all)) {
			t.Fatalf("contributing %v coverage %v sum %d, want %v coverage %v sum %d",
				res.Contributing, res.Coverage, got, want, float64(len(want))/float64(len(all)), sumOf(want))
		}
	}
	for range 3 {
		res, _, err := agg(neptune.SchemeLAT, 1)
		if err != nil {
			t.Fatalf("healthy cluster: %v", err)
		}
		check(res, all)
	}

	if err := nodes[3].Pause(); err != nil {
		t.Fatal(err)
	}
	defer nodes[3].Resume()
	alive := []int{0, 1, 2, 3, 4, 5}
	for _, scheme := range []neptune.Scheme{neptune.SchemeLAT, neptune.SchemeBase, neptune.SchemeLAT} {
		res, took, err := agg(scheme, 0.7)
		if err != nil {
			t.Fatalf("%v with n4 paused, ρ=0.7: %v", scheme, err)
		}
		check(res, alive)
		if res.Status != neptune.AggregatePartial {
			t.Fatalf("status %v, want partial", res.Status)
		}
		if took > deadline+500*time.Millisecond {
			t.Fatalf("%v returned after %v, deadline %v", scheme, took, deadline)
		}
	}
	res, took, err := agg(neptune.SchemeLAT, 0.9)
	if !errors.Is(err, neptune.ErrBelowQuality) {
		t.Fatalf("ρ=0.9 with n4 paused: err = %v, want ErrBelowQuality", err)
	}
	if res.Status != neptune.AggregateFailed || res.Coverage != 0.75 || took > deadline+500*time.Millisecond {
		t.Fatalf("failed call: status %v coverage %v after %v, want failed, 0.75, by the deadline", res.Status, res.Coverage, took)
	}

	if err := nodes[3].Resume(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		res, _, err := agg(neptune.SchemeLAT, 1)
		return err == nil && slices.Equal(res.Contributing, all)
	})
}
