package dispatch

import (
	"context"
	"time"

	"github.com/neptune-cluster/neptune/internal/sched"
)

// DoCharged is Do for a run that measures its own resource use (thread CPU
// time, or a cost the handler reports): the scheduler is charged what run
// returns instead of the wall run time.
func (p *Pool) DoCharged(ctx context.Context, class string, run func(context.Context) time.Duration) error {
	return p.do(ctx, class, func(ctx context.Context) (time.Duration, bool) { return run(ctx), true })
}

// classScheduler is what a pool needs from a class-aware scheduler beyond
// sched.Scheduler.
type classScheduler interface {
	Stats(now time.Time) sched.Stats
	ClassLen(class string) int
}

// Stats returns the scheduler's per-class statistics, or false if the pool
// does not schedule by class.
func (p *Pool) Stats() (sched.Stats, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs, ok := p.sched.(classScheduler)
	if !ok {
		return sched.Stats{}, false
	}
	return cs.Stats(p.clock.Now()), true
}

// LoadFor is the load index a new request of class sees: every active
// request (they hold the slots it waits for, whatever their class) plus the
// queued requests of its own class (the class queue is FIFO). Queued
// requests of other classes are left out because whether they run first is
// the node scheduler's decision, and counting them would make a node
// flooded by one class repel all the others, which is server partitioning
// by accident. An empty class, or a pool that does not schedule by class,
// gets Load.
func (p *Pool) LoadFor(class string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs, ok := p.sched.(classScheduler)
	if !ok || class == "" {
		return p.active + p.sched.Len()
	}
	return p.active + cs.ClassLen(class)
}
