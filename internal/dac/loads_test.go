package dac

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func knownAt(at time.Time, loads ...time.Duration) []Known {
	out := make([]Known, len(loads))
	for i, l := range loads {
		out[i] = Known{Load: l, At: at}
	}
	return out
}

// TestPickPollsBoundedByK: a call polls at most k servers, all of them
// when there are no more than k, none with k = 0, each at most once.
func TestPickPollsBoundedByK(t *testing.T) {
	now := time.Unix(100, 0)
	r := rand.New(rand.NewPCG(1, 2))
	known := knownAt(now, make([]time.Duration, 900)...)
	for _, k := range []int{0, 1, 8, 64} {
		got := PickPolls(known, k, r)
		if len(got) != k {
			t.Errorf("k=%d over 900: polled %d", k, len(got))
		}
		if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
			t.Errorf("k=%d: %v not sorted and distinct", k, got)
		}
	}
	if got := PickPolls(known[:5], 8, r); !slices.Equal(got, []int{0, 1, 2, 3, 4}) {
		t.Errorf("k=8 over 5: polled %v, want all", got)
	}
}

// TestPickPollsUnseenFirstThenRandom: servers never heard of are polled
// first; the rest of the k polls go to servers chosen at random, so over
// many calls every server is polled.
func TestPickPollsUnseenFirstThenRandom(t *testing.T) {
	now := time.Unix(100, 0)
	r := rand.New(rand.NewPCG(3, 4))
	known := knownAt(now, make([]time.Duration, 20)...)
	known[3], known[17] = Known{}, Known{}
	counts := make([]int, 20)
	for range 400 {
		got := PickPolls(known, 4, r)
		if !slices.Contains(got, 3) || !slices.Contains(got, 17) {
			t.Fatalf("unseen servers 3 and 17 not polled: %v", got)
		}
		for _, i := range got {
			counts[i]++
		}
	}
	for i, c := range counts {
		if i != 3 && i != 17 && (c < 20 || c > 60) { // 400·2/18 ≈ 44 each
			t.Errorf("server %d polled %d times in 400 calls, want about 44", i, c)
		}
	}
	// Deterministic for a given seed.
	a := PickPolls(known, 4, rand.New(rand.NewPCG(9, 9)))
	b := PickPolls(known, 4, rand.New(rand.NewPCG(9, 9)))
	if !slices.Equal(a, b) {
		t.Errorf("same seed, different polls: %v vs %v", a, b)
	}
}

// TestEstimateUsesKnownLoads: a fresh load is taken as it is; one that is
// not polled is its known load, corrected the more the older it is, never
// beyond the population's spread, never below zero; a server never heard
// of reads around the mean.
func TestEstimateUsesKnownLoads(t *testing.T) {
	now := time.Unix(100, 0)
	horizon := time.Second
	known := []Known{
		{Load: 10 * ms, At: now},                        // fresh
		{Load: 50 * ms, At: now.Add(-100 * ms)},         // a tenth of the horizon old
		{Load: 90 * ms, At: now.Add(-10 * time.Second)}, // far older than the horizon
		{}, // never heard of
	}
	// The spread of 10, 50, 90 ms is 32.7 ms.
	const spread = 32.66 * float64(ms)
	var dev [4]float64
	var sum [4]float64
	const calls = 4000
	r := rand.New(rand.NewPCG(5, 6))
	for range calls {
		est := Estimate(known, now, horizon, r)
		if est[0] != 10*ms {
			t.Fatalf("fresh load estimated %v, want 10ms", est[0])
		}
		for i, e := range est {
			if e < 0 {
				t.Fatalf("server %d estimated %v < 0", i, e)
			}
			sum[i] += float64(e)
		}
		for i, base := range []time.Duration{10 * ms, 50 * ms, 90 * ms, 50 * ms} {
			d := float64(est[i] - base)
			dev[i] += d * d
		}
	}
	rms := func(i int) float64 { return sqrt(dev[i] / calls) }
	if got := rms(1); got < 0.07*spread || got > 0.13*spread {
		t.Errorf("a tenth of the horizon old: deviation %.2fms, want about %.2fms", got/1e6, 0.1*spread/1e6)
	}
	if got := rms(2); got < 0.9*spread || got > 1.1*spread {
		t.Errorf("older than the horizon: deviation %.2fms, want the spread %.2fms", got/1e6, spread/1e6)
	}
	if mean := sum[1] / calls; mean < 48e6 || mean > 52e6 {
		t.Errorf("stale load's mean estimate %.1fms, want about its known 50ms", mean/1e6)
	}
	if mean := sum[3] / calls; mean < 45e6 || mean > 55e6 {
		t.Errorf("never heard of: mean estimate %.1fms, want about the mean 50ms", mean/1e6)
	}
	// Equal loads have no spread: nothing to correct.
	eq := knownAt(now.Add(-time.Hour), 20*ms, 20*ms)
	if est := Estimate(eq, now, horizon, r); est[0] != 20*ms || est[1] != 20*ms {
		t.Errorf("equal loads estimated %v", est)
	}
}

func sqrt(x float64) float64 { return math.Sqrt(x) }
