package node

import (
	"context"
	"github.com/neptune-cluster/neptune/internal/config"
	"sync"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/dispatch"
	"github.com/neptune-cluster/neptune/internal/service"
)

func classService(mod func(*service.Service)) service.Service {
	s := service.Service{
		Name:    "svc",
		Methods: []service.Method{{Name: "m", Mode: service.Read, Handler: func(context.Context, *service.Request) (*service.Response, error) { return nil, nil }}},
		Classes: []service.Class{
			{Name: "gold", Yield: service.ThroughputYield(4, 2*time.Second), Guarantee: 0.5},
			{Name: "bronze", Yield: service.HybridYield(1, time.Second, 0.5, 2*time.Second)},
		},
	}
	if mod != nil {
		mod(&s)
	}
	return s
}

func TestRegisterPicksTheSchedulerByClasses(t *testing.T) {
	n, err := New(Config{Node: config.Node{Security: config.Security{Insecure: true}, ID: "n"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Register(classService(nil), 0); err != nil {
		t.Fatal(err)
	}
	fifo := classService(func(s *service.Service) { s.Name, s.Classes = "plain", nil })
	if err := n.Register(fifo, 0); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.services["svc"].pool.Stats(); !ok {
		t.Error("service with classes has no class scheduler")
	}
	if _, ok := n.services["plain"].pool.Stats(); ok {
		t.Error("service without classes has a class scheduler")
	}
}

// accountingCase runs requests of one handler through a hosted service
// with the given accounting and returns the resource use the class
// scheduler learnt per request (its EWMA, seeded by the first sample).
func accountingCase(t *testing.T, a service.Accounting, h func(context.Context) *service.Response, parallel, each int) time.Duration {
	t.Helper()
	svc := classService(func(s *service.Service) { s.Accounting = a })
	sch, err := svc.NewScheduler()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := dispatch.New(dispatch.Config{Workers: parallel}, sch, clock.Real(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := &hosted{svc: svc, pool: pool, clock: clock.Real()}
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for range each {
				if err := hs.run(context.Background(), "gold", "m", h); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	st, _ := pool.Stats()
	return st.Classes[0].ExpectedCost
}

// TestAccountingChargesWhatEachModeMeasures compares the three accountings
// on a sleeping handler and a CPU-bound one run by more goroutines than
// the test has CPUs. Sleep: wall time charges the whole wait, thread CPU
// almost nothing, Reported exactly the reported cost. Spin: CPU time is at
// most the wall time (less when the spinners share CPUs).
func TestAccountingChargesWhatEachModeMeasures(t *testing.T) {
	const d = 10 * time.Millisecond
	sleep := func(context.Context) *service.Response {
		time.Sleep(d)
		return &service.Response{Cost: 3 * time.Millisecond}
	}
	spin := func(context.Context) *service.Response { spinFor(d); return nil }

	if got := accountingCase(t, service.WallTime, sleep, 2, 5); got < d {
		t.Errorf("sleep, wall: charged %v, want ≥ %v", got, d)
	}
	if got := accountingCase(t, service.ThreadCPU, sleep, 2, 5); got > d/4 {
		t.Errorf("sleep, cpu: charged %v, want ≤ %v (a sleeping thread burns no CPU)", got, d/4)
	}
	if got := accountingCase(t, service.Reported, sleep, 2, 5); got != 3*time.Millisecond {
		t.Errorf("sleep, reported: charged %v, want the reported 3ms", got)
	}
	if got := accountingCase(t, service.Reported, spin, 1, 3); got < d {
		t.Errorf("spin, reported without a cost: charged %v, want the wall time ≥ %v", got, d)
	}
	cpu := accountingCase(t, service.ThreadCPU, spin, 4, 3)
	wall := accountingCase(t, service.WallTime, spin, 4, 3)
	if cpu <= 0 || cpu > wall+wall/10 {
		t.Errorf("spin: cpu charged %v, wall %v; want 0 < cpu ≤ wall", cpu, wall)
	}
	t.Logf("spin on 4 goroutines: cpu %v, wall %v per request", cpu, wall)
}

func spinFor(d time.Duration) {
	x := 1
	for start := time.Now(); time.Since(start) < d; {
		for range 1000 {
			x = x*31 + 7
		}
	}
	_ = x
}
