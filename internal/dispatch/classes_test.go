package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/sched"
)

func classPool(t *testing.T, workers int) *Pool {
	t.Helper()
	s, err := sched.NewClassScheduler(sched.Config{Policy: sched.EDF, Classes: []sched.ClassConfig{
		{Name: "gold", Yield: sched.Throughput(4, time.Minute)},
		{Name: "bronze", Yield: sched.Throughput(1, time.Minute)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Workers: workers}, s, clock.Real(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadForCountsActiveAndTheOwnClassQueue(t *testing.T) {
	p := classPool(t, 1)
	release, done := blocker(t, p) // class "" is the default class, gold
	for _, class := range []string{"bronze", "bronze", "gold"} {
		go func() { _ = p.Do(context.Background(), class, func(context.Context) {}) }()
	}
	waitLoad(t, p, 4)
	for class, want := range map[string]int{"bronze": 3, "gold": 2, "unknown": 2, "": 4} {
		if got := p.LoadFor(class); got != want {
			t.Errorf("LoadFor(%q) = %d, want %d", class, got, want)
		}
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitLoad(t, p, 0)
	if fifo, _ := New(Config{}, sched.NewFIFO(), clock.Real(), nil); fifo.LoadFor("gold") != 0 {
		t.Error("an idle FIFO pool reports load")
	}
}

func TestDoChargedChargesWhatRunReportsAndIdleRequestsAreCounted(t *testing.T) {
	p := classPool(t, 2)
	for range 3 {
		if err := p.DoCharged(context.Background(), "bronze", func(context.Context) time.Duration { return 7 * time.Second }); err != nil {
			t.Fatal(err)
		}
	}
	st, ok := p.Stats()
	if !ok {
		t.Fatal("class pool has no stats")
	}
	b := st.Classes[1]
	if b.Arrivals != 3 || b.Completions != 3 {
		t.Errorf("bronze arrivals %d, completions %d; want 3 each (requests that ran at once must be counted)", b.Arrivals, b.Completions)
	}
	if b.ExpectedCost != 7*time.Second {
		t.Errorf("bronze expected cost %v, want the reported 7s", b.ExpectedCost)
	}
	if _, ok := (&Pool{sched: sched.NewFIFO()}).Stats(); ok {
		t.Error("a FIFO pool reports class stats")
	}
}
