package balance

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func withBound(b float64) Config {
	c := withPolicy(NameAffinity)
	c.LoadBound = b
	return c
}

func affinity(t *testing.T, bound float64) *Affinity {
	t.Helper()
	return mustNew(t, withBound(bound), 1).(*Affinity)
}

// Every caller ranks the same replicas the same way for a key, whatever
// order it lists them in.
func TestRankIgnoresCandidateOrder(t *testing.T) {
	cands := replicas(8)
	rng := newRNG(3)
	for k := range 200 {
		key := fmt.Sprint("key-", k)
		want := Rank(key, cands)
		shuffled := slices.Clone(cands)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := Rank(key, shuffled); !slices.Equal(got, want) {
			t.Fatalf("%s: ranked %v, and %v from another order", key, got, want)
		}
	}
}

// Keys spread evenly over the replicas' first places.
func TestRankSpreadsKeys(t *testing.T) {
	cands := replicas(4)
	first := map[string]int{}
	const keys = 20000
	for k := range keys {
		first[Rank(fmt.Sprint("k", k), cands)[0]]++
	}
	for _, c := range cands {
		if share := float64(first[c]) / keys; math.Abs(share-0.25) > 0.02 {
			t.Errorf("replica %s is first for %.3f of the keys, want 0.25 ± 0.02 (%v)", c, share, first)
		}
	}
}

// Rendezvous hashing moves only what it must: a replica that leaves moves
// only the keys it ranked first (each to its second), and one that joins
// takes only keys it now ranks first for.
func TestRankMovesOnlyTheKeysOfAChangedReplica(t *testing.T) {
	five := replicas(5)
	four := five[:4]
	moved := 0
	for k := range 5000 {
		key := fmt.Sprint("k", k)
		before, after := Rank(key, four), Rank(key, five)
		if after[0] != before[0] {
			moved++
			if after[0] != "e" {
				t.Fatalf("%s moved from %s to %s when e joined", key, before[0], after[0])
			}
		}
		// e leaving again is the reverse: the others keep their order.
		if !slices.Equal(slices.DeleteFunc(slices.Clone(after), func(r string) bool { return r == "e" }), before) {
			t.Fatalf("%s: ranked %v with e, %v without", key, after, before)
		}
	}
	if share := float64(moved) / 5000; math.Abs(share-0.2) > 0.03 {
		t.Errorf("a fifth replica took %.3f of the keys, want ≈ 1/5", share)
	}
}

func TestCapacity(t *testing.T) {
	for _, tc := range []struct {
		bound    float64
		total, n int
		want     int
	}{
		{1.25, 0, 4, 1},
		{1.25, 2, 4, 1},
		{1.25, 3, 4, 2},
		{1.25, 4, 4, 2},
		{1, 7, 4, 2},
		{1, 8, 4, 3},
		{2, 7, 4, 4},
		{1.25, 0, 1, 2},
	} {
		if got := Capacity(tc.bound, tc.total, tc.n); got != tc.want {
			t.Errorf("Capacity(%v, %d, %d) = %d, want %d", tc.bound, tc.total, tc.n, got, tc.want)
		}
	}
}

// One hot key with nothing finishing: its calls go to its first replica
// until that one exceeds the bound, then down its ranking, the same
// ranking every client uses. Keyed calls never wait for a poll.
func TestHotKeySpillsDownItsRanking(t *testing.T) {
	p := affinity(t, 1.25)
	cands := replicas(4)
	r := Rank("hot", cands)
	// Capacity for totals 0..7 at 1.25 over 4: 1 1 1 2 2 2 3 3; a
	// replica whose load exceeds it is skipped.
	want := []string{r[0], r[0], r[1], r[0], r[1], r[1], r[0], r[1]}
	var got []string
	for range want {
		if pl := p.PlanKey(t0, "hot", cands); len(pl.Poll) != 0 || pl.Wait != 0 {
			t.Fatalf("a keyed call plans %+v; it should never wait for a poll", pl)
		}
		c := p.ChooseKey(t0, "hot", cands, nil)
		p.Sent(t0, c)
		got = append(got, c)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("hot key went to %v, want %v (ranking %v)", got, want, r)
	}
	// Once its first replica's calls finish, the key is back on it.
	for range 3 {
		p.Done(t0, r[0], 0)
	}
	if c := p.ChooseKey(t0, "hot", cands, nil); c != r[0] {
		t.Fatalf("after r0's calls finished the key went to %s, want %s", c, r[0])
	}
}

// The bench's case: four calls in flight from one client over four
// replicas. The default bound keeps a key on its first replica while
// the other three calls are not all there, where a bound that spills as
// soon as two calls meet lost a tenth of the cache hits.
func TestDefaultBoundKeepsKeysAtFewCallsInFlight(t *testing.T) {
	cands := replicas(4)
	r := Rank("k", cands)
	for _, tc := range []struct {
		onFirst int // of the three other calls in flight
		want    string
	}{{0, r[0]}, {1, r[0]}, {2, r[0]}, {3, r[1]}} {
		p := affinity(t, 0)
		for i := range 3 {
			if i < tc.onFirst {
				p.Sent(t0, r[0])
			} else {
				p.Sent(t0, r[1+i%3])
			}
		}
		if got := p.ChooseKey(t0, "k", cands, nil); got != tc.want {
			t.Errorf("%d of 3 calls in flight on the key's first replica: chose %s, want %s", tc.onFirst, got, tc.want)
		}
	}
}

// A polled queue counts where this client's own calls do not see the
// load (other clients'): a fresh answer that overloads the key's first
// replica spills the key; once older than ProbeAge it is ignored.
func TestPolledLoadBlendsIn(t *testing.T) {
	p := affinity(t, 0)
	cands := replicas(4)
	r := Rank("k", cands)
	p.Report(t0, Load{Replica: r[0], Queue: 6})
	// total 6: limit ⌈1.25 × 7 / 4⌉ = 3 < 6.
	if got := p.ChooseKey(t0, "k", cands, nil); got != r[1] {
		t.Fatalf("first replica polled at 6 in flight: chose %s, want the second, %s", got, r[1])
	}
	// An answer passed to ChooseKey counts the same way.
	q := affinity(t, 0)
	if got := q.ChooseKey(t0, "k", cands, []Load{{Replica: r[0], Queue: 6}}); got != r[1] {
		t.Fatalf("answer at 6: chose %s, want %s", got, r[1])
	}
	later := t0.Add(defaultProbeAge + time.Millisecond)
	if got := p.ChooseKey(later, "k", cands, nil); got != r[0] {
		t.Fatalf("after the answer aged out: chose %s, want the first, %s", got, r[0])
	}
	// Its own calls still count when the polled queue is smaller.
	p.Report(later, Load{Replica: r[0], Queue: 0})
	for range 3 {
		p.Sent(later, r[0])
	}
	p.Sent(later, r[2])
	// own: r0 3, r2 1; total 4, limit ⌈1.25 × 5 / 4⌉ = 2 < 3.
	if got := p.ChooseKey(later, "k", cands, nil); got != r[1] {
		t.Fatalf("polled 0 but 3 own calls in flight: chose %s, want %s", got, r[1])
	}
}

// PlanKey probes the key's first replica off the call path, once until
// it answers (or the probe is older than ProbeAge), and not while its
// answer is fresh.
func TestPlanKeyProbesFirstReplica(t *testing.T) {
	p := affinity(t, 0)
	cands := replicas(4)
	first := Rank("k", cands)[0]
	age := defaultProbeAge
	if pl := p.PlanKey(t0, "k", cands); !slices.Equal(pl.Probe, []string{first}) || len(pl.Poll) != 0 {
		t.Fatalf("first keyed call planned %+v, want one probe of %s", pl, first)
	}
	if pl := p.PlanKey(t0.Add(time.Millisecond), "k", cands); len(pl.Probe) != 0 {
		t.Fatalf("probe pending, planned %+v", pl)
	}
	if pl := p.PlanKey(t0.Add(age+time.Millisecond), "k", cands); !slices.Equal(pl.Probe, []string{first}) {
		t.Fatalf("lost probe not asked again: %+v", pl)
	}
	at := t0.Add(2 * age)
	p.Report(at, Load{Replica: first, Queue: 1})
	if pl := p.PlanKey(at.Add(age/2), "k", cands); len(pl.Probe) != 0 {
		t.Fatalf("fresh answer, planned %+v", pl)
	}
	if pl := p.PlanKey(at.Add(age), "k", cands); !slices.Equal(pl.Probe, []string{first}) {
		t.Fatalf("stale answer not probed again: %+v", pl)
	}
}

// The bound holds whatever the keys: with calls started and finished at
// random over a skewed key set, no choice goes to a replica whose load
// exceeds Capacity, and an idle client always sends a key to its first replica.
func TestAffinityNeverExceedsTheBound(t *testing.T) {
	for _, bound := range []float64{1, 1.25, 2} {
		p := affinity(t, bound)
		rng := newRNG(uint64(bound * 100))
		cands := replicas(5)
		out := map[string]int{}
		total := 0
		for step := range 20000 {
			if total > 0 && rng.IntN(2) == 0 {
				// finish a random outstanding call
				n := rng.IntN(total)
				for _, c := range cands {
					if n < out[c] {
						p.Done(t0, c, 0)
						out[c]--
						total--
						break
					}
					n -= out[c]
				}
				continue
			}
			key := fmt.Sprint("k", int(math.Floor(math.Pow(rng.Float64(), 3)*50))) // a few hot keys
			c := p.ChooseKey(t0, key, cands, nil)
			if limit := Capacity(bound, total, len(cands)); out[c] > limit {
				t.Fatalf("bound %v step %d: %s sent to %s at %d in flight, limit %d (%v)", bound, step, key, c, out[c], limit, out)
			}
			if total == 0 && c != Rank(key, cands)[0] {
				t.Fatalf("bound %v: idle, %s went to %s, not its first replica", bound, key, c)
			}
			p.Sent(t0, c)
			out[c]++
			total++
		}
	}
}

// A call without a key is prequal's: it polls ProbeSize replicas.
func TestAffinityWithoutKeyPolls(t *testing.T) {
	p := affinity(t, 0)
	cands := replicas(8)
	if pl := p.Plan(t0, cands); len(pl.Poll) != DefaultConfig().ProbeSize {
		t.Fatalf("keyless plan %+v, want prequal's %d polls", pl, DefaultConfig().ProbeSize)
	}
	if c := p.Choose(t0, cands, []Load{{Replica: "c", Queue: 0}, {Replica: "d", Queue: 5}}); c != "c" {
		t.Fatalf("keyless choice %s, want the idle polled replica c", c)
	}
}

func TestValidateLoadBound(t *testing.T) {
	for _, b := range []float64{-1, 0.5, math.NaN(), math.Inf(1)} {
		err := withBound(b).Validate()
		if err == nil || !strings.Contains(err.Error(), "LoadBound") {
			t.Errorf("LoadBound %v: %v, want an error naming LoadBound", b, err)
		}
	}
	for _, b := range []float64{0, 1, 1.25, 3} {
		if err := withBound(b).Validate(); err != nil {
			t.Errorf("LoadBound %v: %v", b, err)
		}
	}
}

// Any key (a caller's, so anything) ranks every candidate once and is
// sent to one of them.
func FuzzAffinityKey(f *testing.F) {
	f.Add("k", "a,b,c", 3)
	f.Add("", "a", 0)
	f.Add("\x00\xff", "a,a,b", 7)
	f.Fuzz(func(t *testing.T, key, list string, inFlight int) {
		cands := slices.Compact(slices.Sorted(slices.Values(strings.Split(list, ","))))
		r := Rank(key, cands)
		if !slices.Equal(slices.Sorted(slices.Values(r)), cands) {
			t.Fatalf("Rank(%q, %q) = %q, not a permutation", key, cands, r)
		}
		p := affinity(t, 0)
		for i := range inFlight % 16 {
			p.Sent(t0, cands[i%len(cands)])
		}
		if c := p.ChooseKey(t0, key, cands, nil); !slices.Contains(cands, c) {
			t.Fatalf("chose %q, not one of %q", c, cands)
		}
	})
}
