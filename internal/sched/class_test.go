package sched

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Unix(1000, 0)

func sec(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func mustScheduler(t *testing.T, cfg Config) *ClassScheduler {
	t.Helper()
	s, err := NewClassScheduler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// popAll pops until empty at now and returns the classes in order.
func popAll(t *testing.T, s *ClassScheduler, now time.Time) []string {
	t.Helper()
	var got []string
	for s.Len() > 0 {
		r, dropped := s.Pop(now)
		if len(dropped) > 0 {
			t.Fatalf("unexpected drops %v", dropped)
		}
		if r == nil {
			t.Fatal("nil request with a non-empty queue")
		}
		got = append(got, r.Class)
	}
	return got
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Three classes on which the three base policies disagree:
//
//	      deadline  yield  cost   EDF rel.dl  YID dl/yield  Greedy cost/yield
//	a     1 s       1      100ms  1           1             0.1
//	b     3 s       4      400ms  3           0.75          0.1
//	c     2 s       2      50ms   2           1             0.025
func policyClasses() []ClassConfig {
	return []ClassConfig{
		{Name: "a", Yield: Throughput(1, sec(1)), Estimate: sec(0.1)},
		{Name: "b", Yield: Throughput(4, sec(3)), Estimate: sec(0.4)},
		{Name: "c", Yield: Throughput(2, sec(2)), Estimate: sec(0.05)},
	}
}

func TestPoliciesOrderQueueHeads(t *testing.T) {
	tests := []struct {
		policy Policy
		want   []string
	}{
		{EDF, []string{"a", "c", "b"}},
		{YID, []string{"b", "a", "c"}}, // a and c tie at 1: config order
		{Greedy, []string{"c", "a", "b"}},
		{Adaptive, []string{"b", "a", "c"}}, // no drops: YID
	}
	for _, tt := range tests {
		s := mustScheduler(t, Config{Classes: policyClasses(), Policy: tt.policy})
		for _, k := range []string{"a", "b", "c"} {
			s.Push(t0, &Request{Class: k, Arrival: t0})
		}
		if got := popAll(t, s, t0); !equal(got, tt.want) {
			t.Errorf("%v: served %v, want %v", tt.policy, got, tt.want)
		}
	}
}

func TestYIDUsesRelativeDeadlineNow(t *testing.T) {
	// b's deadline is 3 s but it has waited 2.5 s: 0.5/4 beats c's fresh 2/2.
	s := mustScheduler(t, Config{Classes: policyClasses(), Policy: YID})
	s.Push(t0, &Request{Class: "b", Arrival: t0})
	now := t0.Add(sec(2.5))
	s.Push(now, &Request{Class: "c", Arrival: now})
	if got := popAll(t, s, now); !equal(got, []string{"b", "c"}) {
		t.Errorf("served %v, want [b c]", got)
	}
}

func TestAdaptiveSwitchesToGreedyOnDropsAndBack(t *testing.T) {
	s := mustScheduler(t, Config{Classes: policyClasses()})
	// 10 requests of class a arrive and expire unserved: 10/13 > 5 % dropped.
	for range 10 {
		s.Push(t0, &Request{Class: "a", Arrival: t0})
	}
	if _, dropped := s.Pop(t0.Add(sec(1.5))); len(dropped) != 10 {
		t.Fatalf("dropped %d, want 10", len(dropped))
	}
	now := t0.Add(sec(2))
	for _, k := range []string{"a", "b", "c"} {
		s.Push(now, &Request{Class: k, Arrival: now})
	}
	if m := s.Stats(now).Mode; m != Greedy {
		t.Fatalf("mode after drops = %v, want greedy", m)
	}
	if got := popAll(t, s, now); !equal(got, []string{"c", "a", "b"}) {
		t.Errorf("overloaded adaptive served %v, want greedy order [c a b]", got)
	}
	// 31 s later the drops have left the 30 s window: back to YID.
	now = now.Add(sec(31))
	for _, k := range []string{"a", "b", "c"} {
		s.Push(now, &Request{Class: k, Arrival: now})
	}
	if m := s.Stats(now).Mode; m != YID {
		t.Fatalf("mode after window = %v, want yid", m)
	}
	if got := popAll(t, s, now); !equal(got, []string{"b", "a", "c"}) {
		t.Errorf("recovered adaptive served %v, want yid order [b a c]", got)
	}
}

func TestDropsHopelessHeads(t *testing.T) {
	s := mustScheduler(t, Config{Classes: []ClassConfig{
		{Name: "hybrid", Yield: Hybrid(4, sec(1), 2, sec(2)), Estimate: sec(0.5)},
		{Name: "resp", Yield: ResponseTime(1, sec(2)), Estimate: sec(0.5)},
	}})
	now := t0.Add(sec(10))
	late := &Request{Class: "hybrid", Arrival: now.Add(-sec(1.6))}     // done at 2.1 s > D
	inTime := &Request{Class: "hybrid", Arrival: now.Add(-sec(1.4))}   // done at 1.9 s, yield 2.2
	tooLittle := &Request{Class: "resp", Arrival: now.Add(-sec(1.49))} // done at 1.99 s: yield 0.005 < 1 %
	callerGone := &Request{Class: "resp", Arrival: now, Deadline: now.Add(sec(0.4))}
	useful := &Request{Class: "resp", Arrival: now.Add(-sec(1.4))} // yield 0.05
	for _, r := range []*Request{late, inTime, tooLittle, callerGone, useful} {
		s.Push(now, r)
	}
	r, dropped := s.Pop(now)
	if r != inTime {
		t.Errorf("popped %+v, want the hybrid request still in time", r)
	}
	want := []*Request{late, tooLittle, callerGone}
	if len(dropped) != len(want) {
		t.Fatalf("dropped %d requests, want %d", len(dropped), len(want))
	}
	for i := range want {
		if dropped[i] != want[i] {
			t.Errorf("dropped[%d] = %+v, want %+v", i, dropped[i], want[i])
		}
	}
	if r, _ := s.Pop(now); r != useful {
		t.Errorf("second pop = %+v, want the low-yield but useful request", r)
	}
	st := s.Stats(now)
	if st.Classes[0].Drops != 1 || st.Classes[1].Drops != 2 {
		t.Errorf("drops = %d, %d; want 1, 2", st.Classes[0].Drops, st.Classes[1].Drops)
	}
}

// The guarantee rule beats any policy: bronze is worth a quarter of gold
// yet gets its 30 % of the worker time.
func TestGuaranteeHoldsAgainstGreedy(t *testing.T) {
	s := mustScheduler(t, Config{Policy: Greedy, Classes: []ClassConfig{
		{Name: "gold", Yield: Throughput(4, time.Hour), Estimate: sec(0.1)},
		{Name: "bronze", Yield: Throughput(1, time.Hour), Estimate: sec(0.1), Guarantee: 0.3},
	}})
	now := t0
	var served []string
	for range 400 {
		for _, k := range []string{"gold", "bronze"} {
			s.Push(now, &Request{Class: k, Arrival: now})
		}
		r, _ := s.Pop(now)
		now = now.Add(sec(0.1))
		s.Finish(now, r, sec(0.1))
		served = append(served, r.Class)
	}
	if served[0] != "bronze" || served[1] != "gold" {
		t.Errorf("first picks %v, want bronze (no usage yet) then gold", served[:2])
	}
	for w := 10; w < 40; w++ { // every 1 s window after the first
		n := 0
		for _, k := range served[w*10 : w*10+10] {
			if k == "bronze" {
				n++
			}
		}
		if n < 3 || n > 4 { // 3 is the guarantee; more would starve gold
			t.Errorf("window %d: bronze got %d of 10 slots, want 3 (or 4 when rounding)", w, n)
		}
	}
}

// The window rule (hard, short horizon) comes before the decayed-usage rule
// (long horizon): x is far below its long-run share but has had its share
// of the last second; y had nothing in the last second.
func TestWindowGuaranteeBeforeDecayedUsage(t *testing.T) {
	s := mustScheduler(t, Config{Policy: EDF, Classes: []ClassConfig{
		{Name: "x", Yield: Throughput(1, sec(5)), Guarantee: 0.5},
		{Name: "y", Yield: Throughput(1, sec(9)), Guarantee: 0.2},
	}})
	run := func(k string, at time.Time, used time.Duration) {
		s.Push(at, &Request{Class: k, Arrival: at})
		r, _ := s.Pop(at)
		s.Finish(at, r, used)
	}
	run("y", t0, sec(9))             // long ago: y's decayed share stays high
	run("x", t0.Add(sec(5)), sec(1)) // recent: x has the whole window
	now := t0.Add(sec(5.5))
	st := s.Stats(now)
	x, y := st.Classes[0], st.Classes[1]
	if !(x.Share < x.Guarantee && x.WindowShare == 1 && y.WindowShare == 0 && y.Share > y.Guarantee) {
		t.Fatalf("setup: x share %.2f window %.2f, y share %.2f window %.2f", x.Share, x.WindowShare, y.Share, y.WindowShare)
	}
	s.Push(now, &Request{Class: "x", Arrival: now})
	s.Push(now, &Request{Class: "y", Arrival: now})
	if r, _ := s.Pop(now); r.Class != "y" {
		t.Errorf("popped %s, want y (below its share of the last second)", r.Class)
	}
}

func TestGuaranteeServesLargestGap(t *testing.T) {
	s := mustScheduler(t, Config{Policy: EDF, Classes: []ClassConfig{
		{Name: "x", Yield: Throughput(1, sec(1)), Guarantee: 0.2},
		{Name: "y", Yield: Throughput(1, sec(5)), Guarantee: 0.5},
		{Name: "z", Yield: Throughput(1, sec(5)), Guarantee: 0.1},
	}})
	// x used 6 s, y and z 2 s each: shares 0.6, 0.2, 0.2. Only y (gap 0.3)
	// is under its guarantee, so it beats EDF's pick x.
	for _, u := range []struct {
		k string
		s float64
	}{{"x", 6}, {"y", 2}, {"z", 2}} {
		s.Push(t0, &Request{Class: u.k, Arrival: t0})
		r, _ := s.Pop(t0)
		s.Finish(t0, r, sec(u.s))
	}
	for _, k := range []string{"x", "y", "z"} {
		s.Push(t0, &Request{Class: k, Arrival: t0})
	}
	if r, _ := s.Pop(t0); r.Class != "y" {
		t.Errorf("popped %s, want y (largest gap)", r.Class)
	}
}

// Two workers freed at once must not both go to the same under-served class:
// the first dispatch is charged before the second decision.
func TestDispatchChargesExpectedUse(t *testing.T) {
	s := mustScheduler(t, Config{Classes: []ClassConfig{
		{Name: "p", Yield: Throughput(1, time.Hour), Estimate: sec(1), Guarantee: 0.5},
		{Name: "q", Yield: Throughput(1, time.Hour), Estimate: sec(1), Guarantee: 0.5},
	}})
	for range 2 {
		for _, k := range []string{"p", "q"} {
			s.Push(t0, &Request{Class: k, Arrival: t0})
		}
	}
	a, _ := s.Pop(t0)
	b, _ := s.Pop(t0)
	if a.Class == b.Class {
		t.Errorf("both simultaneous dispatches went to %s", a.Class)
	}
	st := s.Stats(t0)
	if st.Classes[0].InFlight != 1 || math.Abs(st.Classes[0].Share-0.5) > 1e-9 {
		t.Errorf("in flight %d share %v, want 1 and 0.5", st.Classes[0].InFlight, st.Classes[0].Share)
	}
}

func TestUsageDecaysAcrossRebase(t *testing.T) {
	s := mustScheduler(t, Config{Classes: []ClassConfig{
		{Name: "a", Yield: Throughput(1, time.Hour)},
		{Name: "b", Yield: Throughput(1, time.Hour)},
	}})
	run := func(k string, at time.Time, used time.Duration) {
		s.Push(at, &Request{Class: k, Arrival: at})
		r, _ := s.Pop(at)
		s.Finish(at, r, used)
	}
	run("a", t0, sec(2))
	if u := s.Stats(t0.Add(sec(10))).Classes[0].Usage; math.Abs(u-2*math.Pow(0.95, 10)) > 1e-9 {
		t.Errorf("usage after 10 s = %v, want 2·0.95^10", u)
	}
	// Past the ~13 min rebase point the ratio must still be exact.
	later := t0.Add(2000 * time.Second)
	run("a", later, sec(1))
	run("b", later.Add(sec(1)), sec(1))
	st := s.Stats(later.Add(sec(1)))
	if want := 0.95 / 1.95; math.Abs(st.Classes[0].Share-want) > 1e-6 {
		t.Errorf("share of a = %v, want %v", st.Classes[0].Share, want)
	}
	if u := st.Classes[1].Usage; math.Abs(u-1) > 1e-9 {
		t.Errorf("usage of b = %v, want 1", u)
	}
}

func TestEWMAAndStats(t *testing.T) {
	s := mustScheduler(t, Config{Default: "b", Classes: []ClassConfig{
		{Name: "a", Yield: ResponseTime(2, sec(2))},
		{Name: "b", Yield: Throughput(1, sec(2))},
	}})
	now := t0
	for i, used := range []float64{0.8, 0.4} {
		s.Push(now, &Request{Class: "a", Arrival: now.Add(-sec(0.5))})
		r, _ := s.Pop(now)
		now = now.Add(sec(0.5))
		s.Finish(now, r, sec(used))
		if i == 0 {
			if c := s.Stats(now).Classes[0]; c.ExpectedCost != sec(0.8) || c.ExpectedService != sec(0.5) {
				t.Fatalf("first sample: cost %v service %v, want 800ms 500ms", c.ExpectedCost, c.ExpectedService)
			}
		}
	}
	s.Push(now, &Request{Class: "nope"}) // unknown: default class b, arrival now
	st := s.Stats(now)
	a, b := st.Classes[0], st.Classes[1]
	if want := sec(0.8 + 0.125*(0.4-0.8)); a.ExpectedCost != want {
		t.Errorf("EWMA cost = %v, want %v", a.ExpectedCost, want)
	}
	// Both completed 1 s after arrival: yield 2·(1−1/2) = 1 each of 2 offered.
	if a.Arrivals != 2 || a.Completions != 2 || a.OfferedYield != 4 || a.RealizedYield != 2 || a.LossPercent() != 50 {
		t.Errorf("class a stats %+v", a)
	}
	if a.MeanWait() != sec(0.5) {
		t.Errorf("mean wait %v, want 500ms", a.MeanWait())
	}
	if b.Arrivals != 1 || b.Queued != 1 || s.Len() != 1 {
		t.Errorf("unknown class not queued on default: %+v", b)
	}
	if got, want := st.LossPercent(), 100*(5-2)/5.0; got != want {
		t.Errorf("total LossPercent = %v, want %v", got, want)
	}
}

func TestFinishIgnoresForeignAndRepeatedRequests(t *testing.T) {
	s := mustScheduler(t, Config{Classes: []ClassConfig{{Name: "a", Yield: Throughput(1, sec(2))}}})
	s.Finish(t0, &Request{Class: "a"}, sec(1))
	s.Push(t0, &Request{Class: "a", Arrival: t0})
	r, _ := s.Pop(t0)
	s.Finish(t0, r, sec(1))
	s.Finish(t0, r, sec(1))
	if c := s.Stats(t0).Classes[0]; c.Completions != 1 || c.InFlight != 0 || math.Abs(c.Usage-1) > 1e-9 {
		t.Errorf("stats after foreign and repeated Finish: %+v", c)
	}
}

// An abandoned dispatch withdraws its charge and leaves the in-flight
// count, but is no completion: the yield, the EWMAs and the guarantee
// shares stay as if it had never been dispatched.
func TestAbandonWithdrawsTheDispatch(t *testing.T) {
	s := mustScheduler(t, Config{Classes: []ClassConfig{
		{Name: "p", Yield: Throughput(1, time.Hour), Estimate: sec(1), Guarantee: 0.5},
		{Name: "q", Yield: Throughput(1, time.Hour), Estimate: sec(1), Guarantee: 0.5},
	}})
	s.Push(t0, &Request{Class: "p", Arrival: t0})
	s.Push(t0, &Request{Class: "q", Arrival: t0})
	p, _ := s.Pop(t0)
	q, _ := s.Pop(t0)
	if p.Class != "p" {
		p, q = q, p
	}
	s.Finish(t0, q, sec(1))
	before := s.Stats(t0).Classes[0]
	s.Abandon(t0, p)
	s.Abandon(t0, p) // a second report of the same request is ignored
	c := s.Stats(t0).Classes[0]
	if c.InFlight != 0 || c.Completions != 0 || c.Abandoned != 1 || c.Dispatched != 1 {
		t.Errorf("after Abandon: %d in flight, %d completed, %d abandoned, %d dispatched; want 0, 0, 1, 1", c.InFlight, c.Completions, c.Abandoned, c.Dispatched)
	}
	if math.Abs(c.Usage) > 1e-9 || c.WindowShare != 0 || c.RealizedYield != 0 {
		t.Errorf("after Abandon: usage %v, window share %v, yield %v; want the charge withdrawn (usage before %v)", c.Usage, c.WindowShare, c.RealizedYield, before.Usage)
	}
	if c.ExpectedCost != before.ExpectedCost || c.ExpectedService != before.ExpectedService {
		t.Errorf("Abandon moved the estimates: cost %v→%v, service %v→%v", before.ExpectedCost, c.ExpectedCost, before.ExpectedService, c.ExpectedService)
	}
}
