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

func TestAggregateEverySchemeCoversEveryPartition(t *testing.T) {
	nodes := startAggCluster(t, 3)
	parts := []int{0, 1, 2, 3, 4, 5}
	for _, scheme := range []neptune.Scheme{neptune.SchemeLAT, neptune.SchemeBase, neptune.SchemeFlat, neptune.SchemeBinomial} {
		t.Run(scheme.String(), func(t *testing.T) {
			for i := range 5 {
				c := nodes[i%len(nodes)].Client()
				res, err := c.Aggregate(context.Background(), neptune.Aggregation{
					Service: "sum", Partitions: parts, Local: "work", Reduce: "sum",
					Deadline: 2 * time.Second, Scheme: scheme,
				})
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				got, err := micro.Decode(res.Data)
				if err != nil {
					t.Fatal(err)
				}
				if res.Status != neptune.AggregateFull || res.Coverage != 1 || !slices.Equal(res.Contributing, parts) || got != sumOf(parts) {
					t.Fatalf("call %d: status %v coverage %v contributing %v sum %d, want full 1 %v %d",
						i, res.Status, res.Coverage, res.Contributing, got, parts, sumOf(parts))
				}
			}
		})
	}
}

func TestAggregateHungPartitionCostsOnlyItself(t *testing.T) {
	nodes := startAggCluster(t, 3, 4)
	parts := []int{0, 1, 2, 3, 4, 5}
	const deadline = 600 * time.Millisecond
	for _, scheme := range []neptune.Scheme{neptune.SchemeLAT, neptune.SchemeBinomial, neptune.SchemeBase} {
		t.Run(scheme.String(), func(t *testing.T) {
			agg := neptune.Aggregation{Service: "sum", Partitions: parts, Local: "work", Reduce: "sum", Quality: 0.8, Deadline: deadline, Scheme: scheme,
				ReduceBudget: 40 * time.Millisecond}
			start := time.Now()
			res, err := nodes[0].Client().Aggregate(context.Background(), agg)
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			want := []int{0, 1, 2, 3, 5}
			got, _ := micro.Decode(res.Data)
			if res.Status != neptune.AggregatePartial || !slices.Equal(res.Contributing, want) || got != sumOf(want) {
				t.Fatalf("status %v contributing %v sum %d, want partial %v %d", res.Status, res.Contributing, got, want, sumOf(want))
			}
			if took > 2*deadline {
				t.Fatalf("returned after %v, deadline %v", took, deadline)
			}

			agg.Quality = 0.9
			res, err = nodes[1].Client().Aggregate(context.Background(), agg)
			if !errors.Is(err, neptune.ErrBelowQuality) {
				t.Fatalf("ρ=0.9 with 5 of 6 partitions: err = %v, want ErrBelowQuality", err)
			}
			if res == nil || res.Status != neptune.AggregateFailed || res.Coverage != 5.0/6 {
				t.Fatalf("failed result = %+v (%v), want status failed, coverage 5/6", res, err)
			}
		})
	}
}

func TestAggregateRejectsUnknownOperatorsAndBadRequests(t *testing.T) {
	nodes := startAggCluster(t, 1)
	c := nodes[0].Client()
	ctx := context.Background()
	_, err := c.Aggregate(ctx, neptune.Aggregation{Service: "sum", Partitions: []int{0, 1}, Local: "nope", Reduce: "sum", Deadline: time.Second})
	if !errors.Is(err, neptune.ErrUnknownMethod) {
		t.Fatalf("unknown local operator: err = %v, want ErrUnknownMethod", err)
	}
	_, err = c.Aggregate(ctx, neptune.Aggregation{Service: "sum", Partitions: []int{0, 7}, Local: "work", Reduce: "sum", Deadline: time.Second})
	if !errors.Is(err, neptune.ErrUnknownPartition) {
		t.Fatalf("unknown partition: err = %v, want ErrUnknownPartition", err)
	}
	for _, tc := range []struct {
		name string
		agg  neptune.Aggregation
	}{
		{"no deadline", neptune.Aggregation{Service: "sum", Partitions: []int{0}, Local: "work", Reduce: "sum"}},
		{"no local", neptune.Aggregation{Service: "sum", Partitions: []int{0}, Reduce: "sum", Deadline: time.Second}},
		{"quality above 1", neptune.Aggregation{Service: "sum", Partitions: []int{0}, Local: "work", Reduce: "sum", Quality: 1.5, Deadline: time.Second}},
		{"no partitions", neptune.Aggregation{Service: "sum", Local: "work", Reduce: "sum", Deadline: time.Second}},
	} {
		if err := tc.agg.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", tc.name, tc.agg)
		}
		if _, err := c.Aggregate(ctx, tc.agg); err == nil {
			t.Errorf("%s: Aggregate accepted %+v", tc.name, tc.agg)
		}
	}
}

// TestGoAggregateRunsAggregationsConcurrently: one goroutine starts
// several aggregations (one of them with a hung partition), selects on
// the first to finish and waits for each; a cancelled one ends early
// with what it had instead of at its deadline.
func TestGoAggregateRunsAggregationsConcurrently(t *testing.T) {
	nodes := startAggCluster(t, 2, 3)
	c := nodes[0].Client()
	ctx := context.Background()
	full := neptune.Aggregation{Service: "sum", Partitions: []int{0, 1, 2}, Local: "work", Reduce: "sum", Deadline: 5 * time.Second}
	var ps []*neptune.PendingAggregate
	for range 4 {
		ps = append(ps, c.GoAggregate(ctx, full))
	}
	hung := c.GoAggregate(ctx, neptune.Aggregation{Service: "sum", Partitions: []int{0, 1, 2, 3}, Local: "work", Reduce: "sum",
		Quality: 1, Deadline: 20 * time.Second})
	select {
	case <-ps[0].Done():
	case <-hung.Done():
		t.Fatal("the aggregation with a hung partition finished first")
	}
	for i, p := range ps {
		res, err := p.Wait()
		if err != nil || res.Status != neptune.AggregateFull {
			t.Fatalf("aggregation %d: %+v, %v", i, res, err)
		}
	}
	start := time.Now()
	hung.Cancel()
	if _, err := hung.Wait(); err == nil {
		t.Fatal("the cancelled aggregation with a hung partition succeeded")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the cancelled aggregation ended %v after Cancel, not before its 20 s deadline", took)
	}
}
