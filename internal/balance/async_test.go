package balance

import (
	"math"
	"slices"
	"testing"
	"time"
)

// newAsyncForTest is the async policy with the given rate, age and reuse
// bound, on a fixed seed.
func newAsyncForTest(t *testing.T, rate float64, age time.Duration, reuse int) *Async {
	t.Helper()
	c := withPolicy(NameAsync)
	c.ProbeRate, c.ProbeAge, c.ProbeReuse = rate, age, reuse
	return mustNew(t, c, 7).(*Async)
}

// call is one whole call on a: Plan, Choose without answers (the async
// shell never waits), Sent.
func call(a *Async, now time.Time, cands []string) (Plan, string) {
	pl := a.Plan(now, cands)
	r := a.Choose(now, cands, nil)
	a.Sent(now, r)
	return pl, r
}

func TestAsyncProbeRateFollowsRequestRate(t *testing.T) {
	cands := replicas(16)
	for _, rate := range []float64{1, 2.5, 3} {
		a := newAsyncForTest(t, rate, 50*time.Millisecond, 2)
		probes, now := 0, t0
		const calls = 2000
		for range calls {
			pl, _ := call(a, now, cands)
			if len(pl.Poll) != 0 || pl.Wait != 0 {
				t.Fatalf("rate %v: Plan %+v asks the call to wait for a poll", rate, pl)
			}
			if n := len(pl.Probe); n != int(rate) && n != int(math.Ceil(rate)) {
				t.Fatalf("rate %v: a call asked for %d probes", rate, n)
			}
			probes += len(pl.Probe)
			for _, r := range pl.Probe { // every probe answered before the next call
				a.Report(now.Add(time.Millisecond/2), Load{Replica: r, Queue: 1})
			}
			now = now.Add(10 * time.Millisecond) // past ProbeAge/10: no answer is too fresh to probe again
		}
		if got := float64(probes) / calls; math.Abs(got-rate) > 0.05 {
			t.Errorf("rate %v: %.3f probes per call", rate, got)
		}
	}
	// No calls, no probes: probing is driven by the calls alone.
	a := newAsyncForTest(t, 3, 50*time.Millisecond, 2)
	if pl := a.Plan(t0, cands); len(pl.Probe) != 3 {
		t.Fatalf("first plan %+v, want 3 probes", pl)
	}
}

func TestAsyncProbesReplicasItKnowsNothingAbout(t *testing.T) {
	a := newAsyncForTest(t, 3, 50*time.Millisecond, 2)
	cands := replicas(6)
	for _, r := range []string{"a", "b", "c"} {
		a.Report(t0, Load{Replica: r, Queue: 1})
	}
	pl := a.Plan(t0, cands)
	slices.Sort(pl.Probe)
	if !slices.Equal(pl.Probe, []string{"d", "e", "f"}) {
		t.Fatalf("probes %v, want the unpooled d e f", pl.Probe)
	}
}

func TestAsyncOneProbeInFlightPerReplica(t *testing.T) {
	a := newAsyncForTest(t, 2, 50*time.Millisecond, 2)
	cands := replicas(3)
	first := a.Plan(t0, cands).Probe
	second := a.Plan(t0.Add(time.Millisecond), cands).Probe
	if len(first) != 2 || len(second) != 1 || slices.Contains(first, second[0]) {
		t.Fatalf("probes %v then %v: want 2, then only the replica not awaiting an answer", first, second)
	}
	if third := a.Plan(t0.Add(2*time.Millisecond), cands).Probe; len(third) != 0 {
		t.Fatalf("every replica awaits an answer, yet Plan probes %v", third)
	}
	// An answer frees its replica (once it is no longer fresh); a lost one
	// stops counting after ProbeAge.
	a.Report(t0.Add(3*time.Millisecond), Load{Replica: first[0], Queue: 0})
	if got := a.Plan(t0.Add(8*time.Millisecond), cands).Probe; !slices.Equal(got, first[:1]) {
		t.Fatalf("after %s answered, Plan probes %v, want it alone", first[0], got)
	}
	if got := a.Plan(t0.Add(52*time.Millisecond), cands).Probe; len(got) != 2 {
		t.Fatalf("after ProbeAge with answers lost, Plan probes %v, want 2", got)
	}
}

// A client calling far more often than ProbeAge/10 (the overhead
// benchmark's sequential calls, ~250 µs apart) does not probe replicas
// whose answers are that fresh: with two replicas it used to send two
// probes per call.
func TestAsyncDoesNotReprobeFreshAnswers(t *testing.T) {
	// Reuse 2: the answers are used up after two calls each, yet they
	// are still fresh.
	a := newAsyncForTest(t, 2, 50*time.Millisecond, 2)
	cands := replicas(2)
	for _, r := range cands {
		a.Report(t0, Load{Replica: r, Queue: 0})
	}
	for at := time.Duration(0); at < 5*time.Millisecond; at += 250 * time.Microsecond {
		if pl, _ := call(a, t0.Add(at), cands); len(pl.Probe) != 0 {
			t.Fatalf("at +%v, answered less than ProbeAge/10 ago: Plan probes %v, want none", at, pl.Probe)
		}
	}
	if pl, _ := call(a, t0.Add(5*time.Millisecond), cands); len(pl.Probe) != 2 {
		t.Fatalf("at ProbeAge/10: Plan probes %v, want both replicas", pl.Probe)
	}
}

func TestAsyncEmptyPoolFallsBackToOwnInFlight(t *testing.T) {
	a := newAsyncForTest(t, 3, 50*time.Millisecond, 2)
	cands := replicas(3)
	a.Sent(t0, "a")
	a.Sent(t0, "b")
	for range 20 {
		if r := a.Choose(t0, cands, nil); r != "c" {
			t.Fatalf("empty pool: chose %q, want c, the only one without our requests", r)
		}
	}
	a.Sent(t0, "c")
	got := map[string]int{}
	for range 300 {
		got[a.Choose(t0, cands, nil)]++
	}
	if len(got) != 3 {
		t.Fatalf("empty pool, one request in flight everywhere: choices %v, want all three", got)
	}
	a.Done(t0, "a", time.Millisecond)
	if r := a.Choose(t0, cands, nil); r != "a" {
		t.Fatalf("after a completed: chose %q, want a", r)
	}
}

func TestAsyncReuseIsBounded(t *testing.T) {
	a := newAsyncForTest(t, 1, time.Second, 2)
	cands := replicas(3)
	a.Report(t0, Load{Replica: "b", Queue: 0})
	// The one answer chooses twice (corrected by the first send, it still
	// is the only pooled one), then is used up: the third call has no
	// answer and goes by in-flight counts, away from b.
	for i := range 2 {
		if r := a.Choose(t0, cands, nil); r != "b" {
			t.Fatalf("use %d: chose %q, want b", i+1, r)
		}
		a.Sent(t0, "b")
	}
	if len(a.pool) != 0 {
		t.Fatalf("after 2 uses the pool holds %d answers, want 0", len(a.pool))
	}
	if r := a.Choose(t0, cands, nil); r == "b" {
		t.Fatal("a used-up answer chose again")
	}
}

func TestAsyncAnswersAgeOut(t *testing.T) {
	a := newAsyncForTest(t, 1, 20*time.Millisecond, 100)
	cands := replicas(3)
	a.Sent(t0, "a") // in-flight fallback would avoid a
	a.Report(t0, Load{Replica: "a", Queue: 0})
	if r := a.Choose(t0.Add(20*time.Millisecond), cands, nil); r != "a" {
		t.Fatalf("answer at its age limit: chose %q, want a", r)
	}
	a.Sent(t0, "a")
	for range 50 {
		if r := a.Choose(t0.Add(21*time.Millisecond), cands, nil); r == "a" {
			t.Fatal("an answer past its age chose a")
		}
	}
	if len(a.pool) != 0 {
		t.Fatalf("pool holds %d answers past their age", len(a.pool))
	}
}

func TestAsyncPoolIsBoundedOldestOut(t *testing.T) {
	c := withPolicy(NameAsync)
	c.PoolSize = 2
	a := mustNew(t, c, 7).(*Async)
	a.Report(t0, Load{Replica: "a", Queue: 0})
	a.Report(t0.Add(time.Millisecond), Load{Replica: "b", Queue: 5})
	a.Report(t0.Add(2*time.Millisecond), Load{Replica: "c", Queue: 6})
	if r := a.Choose(t0.Add(3*time.Millisecond), replicas(3), nil); r != "b" {
		t.Fatalf("chose %q, want b: a, the oldest, left the full pool", r)
	}
	// A newer answer replaces the replica's older one.
	a.Report(t0.Add(4*time.Millisecond), Load{Replica: "c", Queue: 0})
	if r := a.Choose(t0.Add(4*time.Millisecond), replicas(3), nil); r != "c" {
		t.Fatalf("chose %q, want c after its new answer", r)
	}
}

func TestAsyncHotColdPicksLowLatencyAmongCold(t *testing.T) {
	a := newAsyncForTest(t, 1, time.Hour, 100)
	cands := replicas(5) // a b c d e
	now := t0
	// Teach it that a takes 100 ms per request and the others 10 ms.
	for range 5 {
		for _, r := range cands {
			a.Report(now, Load{Replica: r, Queue: 0})
			a.last = choice{replica: r, queue: 0}
			a.Sent(now, r)
			lat := 10 * time.Millisecond
			if r == "a" {
				lat = 100 * time.Millisecond
			}
			a.Done(now, r, lat)
		}
		now = now.Add(time.Second)
	}
	// RIFs 0 1 1 4 4: at the 0.8 quantile (4) d and e are hot; among the
	// cold a (0 × 10 slow: latency 10), b and c (1 each: latency 2), the
	// fastest is b or c, not the idle slow a.
	load := func(qs ...int) {
		for i, q := range qs {
			a.Report(now, Load{Replica: cands[i], Queue: q})
		}
	}
	got := map[string]int{}
	for range 200 {
		load(0, 1, 1, 4, 4)
		got[a.Choose(now, cands, nil)]++
	}
	if got["a"]+got["d"]+got["e"] != 0 || got["b"] == 0 || got["c"] == 0 {
		t.Fatalf("choices %v, want b and c only", got)
	}
	// All hot: at a low quantile the threshold is the least RIF, nobody is
	// below it, and the lowest RIF wins whatever its latency.
	a.hot = 0.1
	load(0, 1, 1, 4, 4)
	if r := a.Choose(now, cands, nil); r != "a" {
		t.Fatalf("chose %q, want a, the lowest RIF when none is cold", r)
	}
}

func TestAsyncCorrectsPooledRIFByOwnTraffic(t *testing.T) {
	a := newAsyncForTest(t, 1, time.Second, 100)
	cands := replicas(2)
	a.Report(t0, Load{Replica: "a", Queue: 0})
	a.Report(t0, Load{Replica: "b", Queue: 2})
	for i := range 3 {
		if r := a.Choose(t0, cands, nil); r != "a" {
			t.Fatalf("send %d: chose %q, want a", i+1, r)
		}
		a.Sent(t0, "a")
	}
	// a is now 3 by our own sends, b 2: b wins.
	if r := a.Choose(t0, cands, nil); r != "b" {
		t.Fatalf("after 3 own sends to a: chose %q, want b", r)
	}
	a.Sent(t0, "b")
	a.Done(t0, "a", time.Millisecond)
	a.Done(t0, "a", time.Millisecond) // a back to 1, b 3
	if r := a.Choose(t0, cands, nil); r != "a" {
		t.Fatalf("after own completions at a: chose %q, want a", r)
	}
}
