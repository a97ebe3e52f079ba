package dispatch

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/sched"
)

// blocker occupies a slot until released.
func blocker(t *testing.T, p *Pool) (release func(), done <-chan error) {
	t.Helper()
	started, rel, out := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		out <- p.Do(context.Background(), "", func(context.Context) { close(started); <-rel })
	}()
	<-started
	return func() { close(rel) }, out
}

func waitLoad(t *testing.T, p *Pool, want int) {
	t.Helper()
	for i := 0; p.Load() != want; i++ {
		if i > 2000 {
			t.Fatalf("load = %d, want %d", p.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPoolRunsAtMostWorkersAtOnceInFIFOOrder(t *testing.T) {
	p, err := New(Config{Workers: 1, QueueLimit: 10}, sched.NewFIFO(), clock.Real(), nil)
	if err != nil {
		t.Fatal(err)
	}
	release, first := blocker(t, p)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Do(context.Background(), "", func(context.Context) { mu.Lock(); order = append(order, i); mu.Unlock() }); err != nil {
				t.Error(err)
			}
		}()
		waitLoad(t, p, 2+i) // enqueue one at a time so the order is known
	}
	release()
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if len(order) != 3 || order[0] != 0 || order[1] != 1 || order[2] != 2 {
		t.Fatalf("ran in order %v, want [0 1 2]", order)
	}
	if p.Load() != 0 {
		t.Fatalf("load after drain = %d", p.Load())
	}
}

func TestPoolRejectsWhenQueueFull(t *testing.T) {
	p, _ := New(Config{Workers: 1, QueueLimit: 1}, sched.NewFIFO(), clock.Real(), nil)
	release, _ := blocker(t, p)
	defer release()
	go func() { _ = p.Do(context.Background(), "", func(context.Context) {}) }()
	waitLoad(t, p, 2)
	err := p.Do(context.Background(), "", func(context.Context) { t.Error("ran despite a full queue") })
	if !errors.Is(err, nerr.ErrOverloaded) || !nerr.Retryable(err) {
		t.Fatalf("err = %v, want retryable ErrOverloaded", err)
	}
}

func TestPoolDropsRequestsWhoseDeadlinePassedInTheQueue(t *testing.T) {
	var mu sync.Mutex
	var outcomes []error
	p, _ := New(Config{Workers: 1}, sched.NewFIFO(), clock.Real(), func(_ string, _, _ time.Duration, err error) {
		mu.Lock()
		outcomes = append(outcomes, err)
		mu.Unlock()
	})
	release, _ := blocker(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := p.Do(ctx, "", func(context.Context) { t.Error("expired request ran") })
	if !errors.Is(err, nerr.ErrDeadline) {
		t.Fatalf("err = %v, want ErrDeadline", err)
	}
	release()
	// The abandoned waiter must not hold or leak a slot.
	ran := false
	if err := p.Do(context.Background(), "", func(context.Context) { ran = true }); err != nil || !ran {
		t.Fatalf("pool unusable after an expired request: err=%v ran=%v", err, ran)
	}
	waitLoad(t, p, 0)
	mu.Lock()
	defer mu.Unlock()
	if len(outcomes) != 3 || !errors.Is(outcomes[0], context.DeadlineExceeded) {
		t.Fatalf("outcomes = %v, want the expired request reported first, then two completions", outcomes)
	}
}

func TestPoolCloseFailsQueuedRequests(t *testing.T) {
	p, _ := New(Config{Workers: 1}, sched.NewFIFO(), clock.Real(), nil)
	release, _ := blocker(t, p)
	queued := make(chan error, 1)
	go func() { queued <- p.Do(context.Background(), "", func(context.Context) {}) }()
	waitLoad(t, p, 2)
	p.Close()
	if err := <-queued; !errors.Is(err, nerr.ErrClosed) {
		t.Fatalf("queued request: err = %v, want ErrClosed", err)
	}
	release()
	if err := p.Do(context.Background(), "", func(context.Context) {}); !errors.Is(err, nerr.ErrClosed) {
		t.Fatalf("after close: err = %v, want ErrClosed", err)
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{{Config{Workers: -1, QueueLimit: 1}, "Workers"}, {Config{Workers: 1, QueueLimit: -1}, "QueueLimit"}} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("Validate(%+v) = %v, want it to name %s", c.cfg, err, c.want)
		}
	}
}

// TestPoolSignalsEveryLoadChange: OnChange follows the load index, seen
// after each signal, through a slot taken, a request queued and both
// leaving.
func TestPoolSignalsEveryLoadChange(t *testing.T) {
	var p *Pool
	var mu sync.Mutex
	var seen []int
	p, err := New(Config{Workers: 1, OnChange: func() { mu.Lock(); seen = append(seen, p.Load()); mu.Unlock() }}, sched.NewFIFO(), clock.Real(), nil)
	if err != nil {
		t.Fatal(err)
	}
	release, first := blocker(t, p)
	second, queued := make(chan struct{}), make(chan error, 1)
	go func() { queued <- p.Do(context.Background(), "", func(context.Context) { <-second }) }()
	waitLoad(t, p, 2)
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	close(second)
	if err := <-queued; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// Took the slot (1), queued (2), the first left and handed the slot
	// on (1), the second left (0).
	if want := []int{1, 2, 1, 0}; !slices.Equal(seen, want) {
		t.Fatalf("loads seen at each signal %v, want %v", seen, want)
	}
}

// TestPoolFinishesAbandonedRequestsItPops: a caller that gave up while
// queued (before its deadline) is popped later; the pool must hand it
// back to the scheduler (sched.Scheduler: every popped request is
// finished once), or the class scheduler counts it in flight for good
// and keeps its expected cost charged against the class.
func TestPoolFinishesAbandonedRequestsItPops(t *testing.T) {
	s, err := sched.NewClassScheduler(sched.Config{Classes: []sched.ClassConfig{{Name: "a", Yield: sched.Throughput(1, time.Hour)}}})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := New(Config{Workers: 1}, s, clock.Real(), nil)
	release, first := blocker(t, p)
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- p.Do(ctx, "a", func(context.Context) { t.Error("abandoned request ran") }) }()
	waitLoad(t, p, 2)
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned request: err = %v, want context.Canceled", err)
	}
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	waitLoad(t, p, 0)
	p.mu.Lock()
	st := s.Stats(time.Now())
	p.mu.Unlock()
	if c := st.Classes[0]; c.InFlight != 0 || c.Completions != 1 || c.Abandoned != 1 || c.Dispatched != c.Completions+c.Abandoned {
		t.Fatalf("after the pool drained: %d in flight, %d dispatched, %d completed, %d abandoned; want 0 in flight, 1 completed, 1 abandoned",
			c.InFlight, c.Dispatched, c.Completions, c.Abandoned)
	}
}
