package gagebench

import (
	"fmt"
	"time"

	"github.com/neptune-cluster/neptune/internal/gage"
	"github.com/neptune-cluster/neptune/lab/report"
)

// newScheduler builds a gateway scheduler for schedulerCost.
type newScheduler func(gage.Config, gage.Options) (gage.Scheduler, error)

// schedulerCost is what a gateway's scheduler itself costs per request:
// Enqueue, Next, Wake and the usage Report that corrects the charge, as
// the gateway's loop calls them, with the capacity far above the load
// and subs subscribers' requests interleaved. It is the fastest of reps
// runs of n requests, so a run the machine preempted does not count.
func schedulerCost(mk newScheduler, subs, n, reps int) (time.Duration, error) {
	var cfg gage.Config
	names := make([]string, subs)
	for i := range subs {
		names[i] = fmt.Sprintf("s%d", i)
		cfg.Subscribers = append(cfg.Subscribers, gage.Subscriber{Name: names[i], Reservation: 50})
	}
	best := time.Duration(-1)
	for range reps {
		s, err := mk(cfg, gage.Options{})
		if err != nil {
			return 0, err
		}
		now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		s.SetCapacity(now, gage.DefaultUnit.Times(1e6))
		used := gage.DefaultUnit.Times(1)
		start := time.Now()
		for id := range uint64(n) {
			// One request per 10 µs of virtual time, far below the
			// capacity: every request may go at once.
			now = now.Add(10 * time.Microsecond)
			if err := s.Enqueue(now, gage.Request{ID: id, Subscriber: names[id%uint64(subs)], Arrived: now}); err != nil {
				return 0, err
			}
			r, ok := s.Next(now)
			if !ok {
				return 0, fmt.Errorf("gagebench: the scheduler held request %d with the capacity idle", id)
			}
			s.Wake(now)
			if err := s.Report(now, gage.Usage{Subscriber: r.Subscriber, Requests: 1, Used: used}); err != nil {
				return 0, err
			}
		}
		if d := time.Since(start) / time.Duration(n); best < 0 || d < best {
			best = d
		}
	}
	return best, nil
}

// schedCostVerdict judges what reservations cost through the scheduler
// alone: the credit scheduler's cost per request over FIFO's, as a share
// of what every process spends on a request, at most 1 - goal. Both
// gateways run the same loop and differ only in the scheduler, so this
// bounds the throughput reservations can cost, where the closed loop's
// own noise on 2 cores is larger than the goal.
func schedCostVerdict(credit, fifo, perRequest time.Duration, goal float64) *report.Check {
	share := float64(credit-fifo) / float64(perRequest)
	c := report.AtMost(fmt.Sprintf("overhead: the credit scheduler's own cost over FIFO's <= %.0f%% of a request's CPU (every process)", 100*(1-goal)),
		share, 1-goal, fmt.Sprintf("%.2f%% (credit %v, fifo %v per request, of %v)", 100*share, credit, fifo, perRequest))
	return c.Doubt(perRequest <= 0, "no request's CPU was measured")
}
