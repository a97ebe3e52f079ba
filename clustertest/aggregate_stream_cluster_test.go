package clustertest

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/micro"
)

// TestAggregateStreamOnRealProcesses runs four node processes hosting two
// micro partitions each (n4: 6 and 7) and streams aggregations: every
// partial result covers more partitions than the one before and holds
// exactly their sum; a caller that stops once quality is enough gets the
// last partial result without waiting for a slow node; a node killed
// mid-aggregation costs exactly its partitions, by the deadline; and a
// killed top of the tree (Base's coordinator) is replaced by the next
// node, the call still ending with a result that meets ρ.
func TestAggregateStreamOnRealProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	nodes, c := microProcs(t, ctx)

	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	const deadline = 3 * time.Second
	open := func(scheme neptune.Scheme, quality float64, local time.Duration) (*neptune.AggregateStream, time.Time) {
		t.Helper()
		start := time.Now()
		s, err := c.AggregateStream(ctx, neptune.Aggregation{
			Service: "micro", Partitions: all, Local: micro.LocalOp, Reduce: micro.ReduceOp,
			LocalParams: micro.Params(local), ReduceParams: micro.Params(time.Millisecond),
			Quality: quality, Deadline: deadline, Scheme: scheme, ReduceBudget: 50 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		return s, start
	}
	// next reads one partial result and checks it against the one before.
	next := func(s *neptune.AggregateStream, prev *neptune.AggregateProgress) (*neptune.AggregateProgress, error) {
		t.Helper()
		p, err := s.Next()
		if err != nil {
			return nil, err
		}
		got, _ := micro.Decode(p.Data)
		if got != sumOf(p.Contributing) || len(p.Contributing)+len(p.Missing) != len(all) ||
			p.Coverage != float64(len(p.Contributing))/float64(len(all)) {
			t.Fatalf("partial %+v: sum %d, want %d", p, got, sumOf(p.Contributing))
		}
		if prev != nil && !p.Final && len(p.Contributing) <= len(prev.Contributing) {
			t.Fatalf("partial %v after %v: it must grow", p.Contributing, prev.Contributing)
		}
		return p, nil
	}
	drain := func(s *neptune.AggregateStream) (partials []*neptune.AggregateProgress) {
		t.Helper()
		var prev *neptune.AggregateProgress
		for {
			p, err := next(s, prev)
			if errors.Is(err, io.EOF) {
				return partials
			}
			if err != nil {
				t.Fatal(err)
			}
			partials, prev = append(partials, p), p
		}
	}

	// Healthy: partial results as the tree reduces, the last final and
	// full, as Aggregate's result.
	for _, scheme := range []neptune.Scheme{neptune.SchemeLAT, neptune.SchemeBase} {
		s, _ := open(scheme, 1, 5*time.Millisecond)
		ps := drain(s)
		last := ps[len(ps)-1]
		if !last.Final || !slices.Equal(last.Contributing, all) || !last.QualityMet {
			t.Fatalf("%v: last partial %+v, want final with every partition", scheme, last)
		}
		res, err := s.Result()
		if err != nil || res.Status != neptune.AggregateFull || !slices.Equal(res.Contributing, all) {
			t.Fatalf("%v: result %+v, %v", scheme, res, err)
		}
	}

	// n4 becomes very slow: its partitions would take ~200 s.
	if _, err := c.Call(ctx, "micro", 6, "slowdown", []byte("1000")); err != nil {
		t.Fatal(err)
	}
	// Stop once quality is enough: Close cancels the tree (n4's
	// operators included) and the result is the last partial, at once
	// rather than at the deadline.
	s, start := open(neptune.SchemeBase, 0.5, 200*time.Millisecond)
	var p *neptune.AggregateProgress
	var err error
	for p == nil || !p.QualityMet {
		if p, err = next(s, p); err != nil {
			t.Fatalf("before quality was met: %v", err)
		}
	}
	s.Close()
	res, err := s.Result()
	if err != nil || res.Status != neptune.AggregatePartial || !slices.Equal(res.Contributing, p.Contributing) {
		t.Fatalf("after Close: %+v, %v; want partial with %v", res, err, p.Contributing)
	}
	if took := time.Since(start); took >= deadline {
		t.Fatalf("closed early but returned after %v, the deadline being %v", took, deadline)
	}

	// Kill n4 mid-aggregation (after the first partial result): the
	// final result has every other partition and misses exactly 6 and 7.
	s, start = open(neptune.SchemeBase, 0.7, 200*time.Millisecond)
	first, err := next(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := nodes[3].Kill(); err != nil {
		t.Fatal(err)
	}
	ps := append([]*neptune.AggregateProgress{first}, drain(s)...)
	last := ps[len(ps)-1]
	if !last.Final || !slices.Equal(last.Contributing, all[:6]) || !slices.Equal(last.Missing, []int{6, 7}) || !last.QualityMet {
		t.Fatalf("n4 killed: last partial %+v, want final with 0..5, missing 6 and 7", last)
	}
	if res, err := s.Result(); err != nil || res.Status != neptune.AggregatePartial || res.Coverage != 0.75 {
		t.Fatalf("n4 killed: result %+v, %v", res, err)
	}
	if took := time.Since(start); took > deadline+time.Second {
		t.Fatalf("n4 killed: final after %v, deadline %v", took, deadline)
	}

	// Kill the top of the tree (Base's coordinator n1) mid-aggregation:
	// the stream goes on through the next node, which starts the tree
	// again without n1's and n4's partitions, and the result meets ρ.
	s, _ = open(neptune.SchemeBase, 0.5, 200*time.Millisecond)
	if first, err = next(s, nil); err != nil {
		t.Fatal(err)
	}
	if err := nodes[0].Kill(); err != nil {
		t.Fatal(err)
	}
	ps = append([]*neptune.AggregateProgress{first}, drain(s)...)
	last = ps[len(ps)-1]
	shown := ps[len(ps)-2].Contributing
	if len(ps) == 1 {
		shown = nil
	}
	if !last.Final || !last.QualityMet || slices.Contains(last.Contributing, 6) || slices.Contains(last.Contributing, 7) ||
		!(slices.Equal(last.Contributing, []int{2, 3, 4, 5}) || slices.Equal(last.Contributing, shown)) {
		t.Fatalf("n1 killed: last partial %+v (largest shown before %v), want 2..5 from n2 or what n1 showed", last, shown)
	}
	if res, err := s.Result(); err != nil || res.Status != neptune.AggregatePartial {
		t.Fatalf("n1 killed: result %+v, %v", res, err)
	}
}
