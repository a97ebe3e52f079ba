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
// 0: Mirrokni et al.'s c and Envoy's hash_balance_factor 125. A replica
// is overloaded, and a keyed call skips it, when its load exceeds
// ⌈1.25 × the mean load, this call included⌉ (Capacity), so it may take
// one call past that ceiling: Envoy's rule, which at a few calls in flight
// leaves a replica one call of slack above the mean instead of spilling
// whenever two calls meet on it (the old absolute-looking bound of 2 with
// "load < limit" spilled at 4 in flight per client and cost a tenth of
// the hits, docs/experiments/locality.md).
const DefaultLoadBound = 1.25

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
// held — and takes the first that is not overloaded: whose load is at
// most Capacity, ⌈LoadBound × the mean load with this call⌉. Some
// candidate always qualifies (their loads cannot all exceed the mean).
//
// Load blends two signals. This client's own requests in flight (Sent
// minus Done), as Envoy's bounded loads count them, are exact but blind
// to other clients; a replica's polled queue (a probe's answer, in
// Report or ChooseKey's answers, younger than ProbeAge) sees every
// client's calls. A replica's load is the larger of the two. Polls stay
// off the call path: PlanKey asks for an asynchronous probe (Plan.Probe)
// of the key's first replica when its answer is stale, so a cache hit
// costs no round trip and the probes follow the keys that are used.
// A hot key spills to its second-ranked replica, also the same for every
// client, so the spilled share stays cached too.
//
// A call without a key falls back to prequal (the default poller), so a
// service whose callers key only some calls keeps polling for the rest.
// Not safe for concurrent use.
type Affinity struct {
	keyless     Policy
	bound       float64
	age         time.Duration
	outstanding map[string]int
	polled      map[string]Load      // the latest answer per replica
	polledAt    map[string]time.Time // when it arrived
	probing     map[string]time.Time // probes asked for and not answered
}

func newAffinity(cfg Config, rng *rand.Rand) *Affinity {
	return &Affinity{keyless: newPrequal(cfg, rng), bound: cmp.Or(cfg.LoadBound, DefaultLoadBound),
		age: cmp.Or(cfg.ProbeAge, defaultProbeAge), outstanding: map[string]int{},
		polled: map[string]Load{}, polledAt: map[string]time.Time{}, probing: map[string]time.Time{}}
}

// Plan is prequal's, for a call without a key.
func (p *Affinity) Plan(now time.Time, candidates []string) Plan {
	return p.keyless.Plan(now, candidates)
}

// Choose is prequal's, for a call without a key.
func (p *Affinity) Choose(now time.Time, candidates []string, answers []Load) string {
	return p.keyless.Choose(now, candidates, answers)
}

// PlanKey waits for no poll. It asks for an asynchronous probe of the
// key's first replica when no answer from it is younger than ProbeAge
// and none is pending (a lost one is asked again after ProbeAge).
func (p *Affinity) PlanKey(now time.Time, key string, candidates []string) Plan {
	first := Rank(key, candidates)[0]
	if p.fresh(now, first) {
		return Plan{}
	}
	if at, ok := p.probing[first]; ok && now.Sub(at) <= p.age {
		return Plan{}
	}
	p.probing[first] = now
	return Plan{Probe: []string{first}}
}

// ChooseKey returns the highest-ranked candidate for key that is not
// overloaded.
func (p *Affinity) ChooseKey(now time.Time, key string, candidates []string, answers []Load) string {
	for _, l := range answers {
		p.Report(now, l)
	}
	loads := make(map[string]int, len(candidates))
	total := 0
	for _, c := range candidates {
		loads[c] = p.load(now, c)
		total += loads[c]
	}
	limit := Capacity(p.bound, total, len(candidates))
	ranked := Rank(key, candidates)
	i := slices.IndexFunc(ranked, func(c string) bool { return loads[c] <= limit })
	return ranked[max(i, 0)] // i ≥ 0: the loads cannot all exceed the mean
}

// load is replica's load: this client's calls in flight to it, or its
// fresh polled queue if that is larger.
func (p *Affinity) load(now time.Time, replica string) int {
	l := p.outstanding[replica]
	if p.fresh(now, replica) {
		l = max(l, p.polled[replica].Queue)
	}
	return l
}

func (p *Affinity) fresh(now time.Time, replica string) bool {
	at, ok := p.polledAt[replica]
	return ok && now.Sub(at) < p.age
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

// Report keeps a polled or pushed load for the keyed path and passes it
// to the keyless poller.
func (p *Affinity) Report(now time.Time, l Load) {
	p.polled[l.Replica], p.polledAt[l.Replica] = l, now
	delete(p.probing, l.Replica)
	p.keyless.Report(now, l)
}

// Capacity is the bounded-load limit ⌈bound × (total+1) / n⌉, where total
// is the load of all n candidates before the request: a replica whose
// load exceeds it is overloaded (Envoy's rule, so a replica at the limit
// still takes one more). With bound ≥ 1 the n candidates cannot all
// exceed it, so one always takes the request.
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
