package balance

import (
	"cmp"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// DefaultLoadBound is the affinity policy's bound when Config.LoadBound is
// 0: a replica takes a keyed call while this client's requests in flight
// to it, the call included, stay within twice their mean over the
// candidates, rounded up (Mirrokni et al.'s c; Envoy's
// hash_balance_factor 200). Their 1.25 is for balancers with many calls
// in flight: with four, the rounding makes a replica with two "overloaded"
// and keys spill often — in `neptune bench locality` at 4 calls in flight
// per client over 3 replicas, 1.25 kept a hit ratio of 0.36 where 2 kept
// 0.48 and pure hashing 0.48 (docs/experiments/locality.md).
const DefaultLoadBound = 2.0

// Affine is a Policy that can route by an affinity key (a cache key, a
// user): a call that carries one goes through PlanKey and ChooseKey
// instead of Plan and Choose. Sent, Done and Report serve both kinds.
type Affine interface {
	Policy
	// PlanKey returns the polls to send before choosing for key.
	PlanKey(now time.Time, key string, candidates []string) Plan
	// ChooseKey picks the replica for a call with key.
	ChooseKey(now time.Time, key string, candidates []string, answers []Load) string
}

// Affinity keeps each key on a stable replica for cache locality (USITS
// §2.1 after LARD; Gage §3.4's "file cache affinity") while bounding any
// replica's load: consistent hashing with bounded loads (Mirrokni,
// Thorup, Zadimoghaddam, SODA 2018) over rendezvous hashing.
//
// A keyed call ranks the candidates by their highest-random-weight hash
// with the key (Thaler and Ravishankar) — every client ranks them the
// same, and a replica that joins or leaves moves only the keys it wins or
// held — and takes the first whose load, with this call, stays within
// LoadBound × the mean load plus this call, rounded up. Load is this
// client's own requests in flight (Sent minus Done), as Envoy's bounded
// loads measure it: no poll on the keyed path, so a cache hit costs no
// round trip. A hot key spills to its second-ranked replica, also the
// same for every client, so the spilled share stays cached too. Because
// the bound is at least the mean, some candidate always satisfies it.
//
// A call without a key falls back to prequal (the default poller), so a
// service whose callers key only some calls keeps polling for the rest.
// Not safe for concurrent use.
type Affinity struct {
	keyless     Policy
	bound       float64
	outstanding map[string]int
}

func newAffinity(cfg Config, rng *rand.Rand) *Affinity {
	return &Affinity{keyless: newPrequal(cfg, rng), bound: cmp.Or(cfg.LoadBound, DefaultLoadBound), outstanding: map[string]int{}}
}

// Plan is prequal's, for a call without a key.
func (p *Affinity) Plan(now time.Time, candidates []string) Plan {
	return p.keyless.Plan(now, candidates)
}

// Choose is prequal's, for a call without a key.
func (p *Affinity) Choose(now time.Time, candidates []string, answers []Load) string {
	return p.keyless.Choose(now, candidates, answers)
}

// PlanKey polls nobody: a keyed call chooses on its own loads.
func (p *Affinity) PlanKey(time.Time, string, []string) Plan { return Plan{} }

// ChooseKey returns the highest-ranked candidate for key whose load stays
// within the bound.
func (p *Affinity) ChooseKey(_ time.Time, key string, candidates []string, _ []Load) string {
	total := 0
	for _, c := range candidates {
		total += p.outstanding[c]
	}
	limit := Capacity(p.bound, total, len(candidates))
	ranked := Rank(key, candidates)
	i := slices.IndexFunc(ranked, func(c string) bool { return p.outstanding[c] < limit })
	return ranked[max(i, 0)] // i ≥ 0: the bound is at least the mean
}

// Sent counts a request in flight to replica.
func (p *Affinity) Sent(now time.Time, replica string) {
	p.outstanding[replica]++
	p.keyless.Sent(now, replica)
}

// Done counts a request to replica as finished.
func (p *Affinity) Done(now time.Time, replica string, latency time.Duration) {
	if p.outstanding[replica] <= 1 {
		delete(p.outstanding, replica)
	} else {
		p.outstanding[replica]--
	}
	p.keyless.Done(now, replica, latency)
}

// Report passes a late or pushed load to the keyless poller.
func (p *Affinity) Report(now time.Time, l Load) { p.keyless.Report(now, l) }

// Capacity is the bounded-load limit: a replica may take one more request
// while its load is below ⌈bound × (total+1) / n⌉, where total is the
// load of all n candidates before it. With bound ≥ 1 the n candidates
// cannot all be at the limit, so one always takes the request.
func Capacity(bound float64, total, n int) int {
	return int(math.Ceil(bound * float64(total+1) / float64(n)))
}

// Rank orders candidates by their rendezvous weight for key, highest
// first (a new slice): every caller ranks the same replicas the same way
// for the same key.
func Rank(key string, candidates []string) []string {
	type weighted struct {
		replica string
		w       uint64
	}
	ws := make([]weighted, len(candidates))
	for i, c := range candidates {
		ws[i] = weighted{c, weight(key, c)}
	}
	slices.SortFunc(ws, func(a, b weighted) int {
		if c := cmp.Compare(b.w, a.w); c != 0 {
			return c
		}
		return cmp.Compare(a.replica, b.replica)
	})
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.replica
	}
	return out
}

// weight is key's rendezvous weight on replica: FNV-1a over both (a zero
// byte between, so "ab"+"c" and "a"+"bc" differ), finished with
// SplitMix64's mixer, whose avalanche FNV lacks on short inputs.
func weight(key, replica string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte(replica))
	z := h.Sum64()
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
