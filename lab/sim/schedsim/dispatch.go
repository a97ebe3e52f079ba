package schedsim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/neptune-cluster/neptune/internal/sched"
)

// dispatchConfig is a steady-state scheduler configuration for measuring
// the cost of a decision: n classes of mixed yield shapes and deadlines,
// the first 30 % with guarantees summing to 0.6.
func dispatchConfig(n int, p sched.Policy, seed uint64) sched.Config {
	rng := rand.New(rand.NewPCG(seed, 1))
	cfg := sched.Config{Policy: p}
	guaranteed := max(1, n*3/10)
	for k := range n {
		c := 1 + 9*rng.Float64()
		d := seconds(1 + 4*rng.Float64())
		var y sched.Yield
		switch k % 3 {
		case 0:
			y = sched.Throughput(c, d)
		case 1:
			y = sched.ResponseTime(c, d)
		default:
			y = sched.Hybrid(c, d/2, c/2, d)
		}
		g := 0.0
		if k < guaranteed {
			g = 0.6 / float64(guaranteed)
		}
		cfg.Classes = append(cfg.Classes, sched.ClassConfig{
			Name: fmt.Sprintf("c%03d", k), Yield: y, Guarantee: g, Estimate: seconds(0.0005 + 0.002*rng.Float64()),
		})
	}
	return cfg
}

// dispatchLoad drives s through an overloaded steady state on virtual time:
// every 1 ms step two requests arrive (classes in a scrambled order, callers
// waiting 2 s), one is dispatched and the one dispatched before it
// finishes, so queues stay long and drops happen as they would at 200 %
// demand.
type dispatchLoad struct {
	s       sched.Scheduler
	names   []string
	now     time.Time
	step    int
	running *sched.Request
}

func newDispatchLoad(s sched.Scheduler, names []string, depth int) *dispatchLoad {
	l := &dispatchLoad{s: s, names: names, now: time.Unix(0, 0)}
	for range depth {
		l.push()
	}
	return l
}

func (l *dispatchLoad) push() {
	l.step++
	l.s.Push(l.now, &sched.Request{Class: l.names[(l.step*37)%len(l.names)], Arrival: l.now, Deadline: l.now.Add(2 * time.Second)})
}

// pop makes one decision, timed by the caller.
func (l *dispatchLoad) pop() *sched.Request {
	r, _ := l.s.Pop(l.now)
	return r
}

// finish completes the previous request and moves time on 1 ms.
func (l *dispatchLoad) finish(r *sched.Request) {
	if l.running != nil {
		l.s.Finish(l.now, l.running, time.Millisecond)
	}
	l.running = r
	l.now = l.now.Add(time.Millisecond)
	l.push()
	l.push()
}
