package micro

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/dac/dactest"
)

func TestAggregatorSumsPartitionsAndReducesCommutatively(t *testing.T) {
	agg := AggConfig{Local: time.Microsecond, Reduce: time.Microsecond}.Aggregator()
	ctx := context.Background()
	a, err := agg.Local[LocalOp](ctx, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := agg.Local[LocalOp](ctx, 6, Params(0))
	if err != nil {
		t.Fatal(err)
	}
	ab, err := agg.Reduce[ReduceOp](ctx, a, b, nil)
	if v, _ := Decode(ab); err != nil || v != 5+7 {
		t.Fatalf("reduce = %d, %v, want 12", v, err)
	}
	if _, err := agg.Local[LocalOp](ctx, 0, []byte{1}); err == nil {
		t.Error("3-byte params accepted")
	}
	reduce := func(x, y uint64) (uint64, error) {
		r, err := agg.Reduce[ReduceOp](ctx, Encode(x), Encode(y), Params(0))
		if err != nil {
			return 0, err
		}
		return Decode(r)
	}
	dactest.CheckReducer(t, reduce, func(r *rand.Rand) uint64 { return r.Uint64N(1 << 40) }, 200)
}

func TestAggConfigValidate(t *testing.T) {
	for _, c := range []AggConfig{{Local: -1}, {Reduce: -1}, {Local: 2 * MaxDuration}} {
		if c.Validate() == nil {
			t.Errorf("Validate accepted %+v", c)
		}
	}
	if err := (AggConfig{}).Validate(); err != nil {
		t.Errorf("zero config: %v", err)
	}
}

func TestSlowdownReturnsPreviousFactorAndRejectsBadOnes(t *testing.T) {
	s := newSleeper(1)
	ctx := context.Background()
	for _, tc := range []struct{ set, prev string }{{"5", "1"}, {"0.5", "5"}, {"1", "0.5"}} {
		resp, err := s.setSlowdown(ctx, &neptune.Request{Body: []byte(tc.set)})
		if err != nil || string(resp.Body) != tc.prev {
			t.Fatalf("slowdown %s: %v, %v, want previous %s", tc.set, resp, err, tc.prev)
		}
	}
	for _, bad := range []string{"0", "-1", "fast", "1e9"} {
		if _, err := s.setSlowdown(ctx, &neptune.Request{Body: []byte(bad)}); err == nil {
			t.Errorf("slowdown %q accepted", bad)
		}
	}
}
