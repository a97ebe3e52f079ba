package schedsim

import (
	"fmt"
	"testing"

	"github.com/neptune-cluster/neptune/internal/sched"
)

// BenchmarkDispatch times one scheduling step (two Pushes, a Pop and a
// Finish at 200 % demand) for FIFO and for the class scheduler with 3 and
// 100 classes. `neptune sim sched --dispatch` reports the decision's p99.
func BenchmarkDispatch(b *testing.B) {
	for _, n := range []int{0, 3, 100} {
		name := "fifo"
		if n > 0 {
			name = fmt.Sprintf("adaptive-%d-classes", n)
		}
		b.Run(name, func(b *testing.B) {
			var s sched.Scheduler = sched.NewFIFO()
			names := []string{""}
			if n > 0 {
				cfg := dispatchConfig(n, sched.Adaptive, 1)
				cs, err := sched.NewClassScheduler(cfg)
				if err != nil {
					b.Fatal(err)
				}
				s, names = cs, nil
				for _, c := range cfg.Classes {
					names = append(names, c.Name)
				}
			}
			l := newDispatchLoad(s, names, 1000)
			for b.Loop() {
				l.finish(l.pop())
			}
		})
	}
}

func TestDispatchLoadKeepsQueuesBusy(t *testing.T) {
	cfg := dispatchConfig(100, sched.Adaptive, 1)
	cs, err := sched.NewClassScheduler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cfg.Classes {
		names = append(names, c.Name)
	}
	l := newDispatchLoad(cs, names, 1000)
	for range 5000 {
		if r := l.pop(); r == nil {
			t.Fatal("dispatch load ran dry")
		} else {
			l.finish(r)
		}
	}
	st := cs.Stats(l.now)
	var queued, busy int
	for _, c := range st.Classes {
		queued += c.Queued
		if c.Queued > 0 {
			busy++
		}
	}
	if queued < 1000 || busy < 70 {
		t.Errorf("after 5000 steps %d requests queued in %d classes; the benchmark would not measure a loaded scheduler", queued, busy)
	}
}
