// Package micro is the micro-benchmark service of dissertation §4.5.1: its
// methods take as long as the caller asks, so experiments and tests control
// service times exactly. "sleep" waits (a request that holds a worker but
// no CPU, like one blocked on I/O); "spin" keeps a CPU busy. Both report
// the requested duration as Response.Cost.
package micro

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune"
)

// MaxDuration bounds what a caller may ask for, so a typo cannot pin a
// worker for hours.
const MaxDuration = time.Minute

// Service returns the micro service. The body of either method is a Go
// duration such as "20ms"; the answer is the body. Its aggregation
// operators are the DAC micro benchmark's (aggregate.go).
func Service() neptune.Service {
	agg := newSleeper(0)
	return neptune.Service{
		Name:      "micro",
		Aggregate: AggConfig{}.aggregator(agg),
		Methods: []neptune.Method{
			{Name: "sleep", Mode: neptune.Read, Handler: func(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
				d, err := duration(r.Body)
				if err != nil {
					return nil, err
				}
				t := time.NewTimer(d)
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return &neptune.Response{Body: r.Body, Cost: d}, nil
			}},
			{Name: "spin", Mode: neptune.Read, Handler: func(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
				d, err := duration(r.Body)
				if err != nil {
					return nil, err
				}
				Spin(d)
				return &neptune.Response{Body: r.Body, Cost: d}, nil
			}},
			// slowdown (body "5") multiplies this node's aggregation
			// operator costs: a fault-injection knob for experiments, to
			// call on one node directly.
			{Name: "slowdown", Mode: neptune.Write, Handler: agg.setSlowdown},
		},
	}
}

// Spin keeps the calling goroutine computing for d of wall time.
func Spin(d time.Duration) {
	x := uint64(1)
	for start := time.Now(); time.Since(start) < d; {
		for range 1000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	sink.Store(x)
}

// sink keeps Spin's arithmetic from being optimised away.
var sink atomic.Uint64

func duration(body []byte) (time.Duration, error) {
	d, err := time.ParseDuration(string(body))
	if err != nil || d < 0 || d > MaxDuration {
		return 0, fmt.Errorf("micro: body %q is not a duration in 0..%v like 20ms", body, MaxDuration)
	}
	return d, nil
}
