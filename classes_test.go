package neptune

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/dispatch"
)

func classService(mod func(*Service)) Service {
	s := Service{
		Name:    "svc",
		Methods: []Method{{Name: "m", Mode: Read, Handler: func(context.Context, *Request) (*Response, error) { return nil, nil }}},
		Classes: []Class{
			{Name: "gold", Yield: ThroughputYield(4, 2*time.Second), Guarantee: 0.5},
			{Name: "bronze", Yield: HybridYield(1, time.Second, 0.5, 2*time.Second)},
		},
	}
	if mod != nil {
		mod(&s)
	}
	return s
}

func TestServiceValidateNamesTheClassField(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Service)
		want string // "" means valid
	}{
		{"valid", nil, ""},
		{"no classes is FIFO", func(s *Service) { s.Classes = nil }, ""},
		{"policy without classes", func(s *Service) { s.Classes, s.Policy = nil, EDF }, "Policy and DefaultClass need Classes"},
		{"empty class name", func(s *Service) { s.Classes[1].Name = "" }, "Classes[1].Name is empty"},
		{"duplicate class", func(s *Service) { s.Classes[1].Name = "gold" }, "Classes[1].Name"},
		{"guarantee above 1", func(s *Service) { s.Classes[0].Guarantee = 1.5 }, "Classes[0].Guarantee"},
		{"guarantees sum above 1", func(s *Service) { s.Classes[1].Guarantee = 0.6 }, "Guarantee sum"},
		{"rising yield", func(s *Service) { s.Classes[1].Yield.Penalty = 2 }, `Classes[1].Yield ("bronze"): Penalty 2 exceeds Full 1`},
		{"zero deadline", func(s *Service) { s.Classes[0].Yield = ThroughputYield(1, 0) }, "Classes[0].Yield"},
		{"unknown default", func(s *Service) { s.DefaultClass = "silver" }, "DefaultClass"},
		{"bad policy", func(s *Service) { s.Policy = 9 }, "Policy"},
		{"bad accounting", func(s *Service) { s.Accounting = 7 }, "Accounting"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := classService(tt.mod)
			err := s.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("accepted, want an error naming %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("error %q does not name %q", err, tt.want)
			}
		})
	}
}

func TestParsePolicyAndAccountingRoundTrip(t *testing.T) {
	for _, p := range []SchedPolicy{Adaptive, EDF, YID, Greedy} {
		if got, err := ParseSchedPolicy(strings.ToUpper(p.String())); err != nil || got != p {
			t.Fatalf("ParseSchedPolicy(%q) = %v, %v", p, got, err)
		}
	}
	for _, a := range []Accounting{WallTime, ThreadCPU, Reported} {
		if got, err := ParseAccounting(a.String()); err != nil || got != a {
			t.Fatalf("ParseAccounting(%q) = %v, %v", a, got, err)
		}
	}
	if _, err := ParseAccounting("tokens"); err == nil {
		t.Fatal("ParseAccounting accepted tokens")
	}
}

func TestYieldShapes(t *testing.T) {
	h := HybridYield(4, time.Second, 2, 2*time.Second)
	for _, c := range []struct {
		r    time.Duration
		want float64
	}{{0, 4}, {time.Second, 4}, {1500 * time.Millisecond, 3}, {2 * time.Second, 2}, {2*time.Second + 1, 0}} {
		if got := h.At(c.r); got != c.want {
			t.Errorf("hybrid At(%v) = %v, want %v", c.r, got, c.want)
		}
	}
	if got := ResponseTimeYield(2, 2*time.Second).At(time.Second); got != 1 {
		t.Errorf("response-time At(D/2) = %v, want 1", got)
	}
	if got := ThroughputYield(2, time.Second).At(time.Second); got != 2 {
		t.Errorf("throughput At(D) = %v, want 2", got)
	}
}

func TestRegisterPicksTheSchedulerByClasses(t *testing.T) {
	n, err := NewNode(NodeConfig{ID: "n"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Register(classService(nil), 0); err != nil {
		t.Fatal(err)
	}
	fifo := classService(func(s *Service) { s.Name, s.Classes = "plain", nil })
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
func accountingCase(t *testing.T, a Accounting, h func(context.Context) *Response, parallel, each int) time.Duration {
	t.Helper()
	svc := classService(func(s *Service) { s.Accounting = a })
	sch, err := svc.newScheduler()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := dispatch.New(dispatch.Config{Workers: parallel}, sch, clock.Real(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := &hosted{svc: svc, pool: pool}
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for range each {
				if err := hs.run(context.Background(), "gold", h); err != nil {
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
	sleep := func(context.Context) *Response { time.Sleep(d); return &Response{Cost: 3 * time.Millisecond} }
	spin := func(context.Context) *Response { spinFor(d); return nil }

	if got := accountingCase(t, WallTime, sleep, 2, 5); got < d {
		t.Errorf("sleep, wall: charged %v, want ≥ %v", got, d)
	}
	if got := accountingCase(t, ThreadCPU, sleep, 2, 5); got > d/4 {
		t.Errorf("sleep, cpu: charged %v, want ≤ %v (a sleeping thread burns no CPU)", got, d/4)
	}
	if got := accountingCase(t, Reported, sleep, 2, 5); got != 3*time.Millisecond {
		t.Errorf("sleep, reported: charged %v, want the reported 3ms", got)
	}
	if got := accountingCase(t, Reported, spin, 1, 3); got < d {
		t.Errorf("spin, reported without a cost: charged %v, want the wall time ≥ %v", got, d)
	}
	cpu := accountingCase(t, ThreadCPU, spin, 4, 3)
	wall := accountingCase(t, WallTime, spin, 4, 3)
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
