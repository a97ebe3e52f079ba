package balance

import (
	"math/rand/v2"
	"slices"
	"time"
)

// passive implements the hooks a policy ignores.
type passive struct{}

func (passive) Plan(time.Time, []string) Plan         { return Plan{} }
func (passive) Sent(time.Time, string)                {}
func (passive) Done(time.Time, string, time.Duration) {}
func (passive) Report(time.Time, Load)                {}

// Random picks a candidate uniformly at random: the no-information baseline.
// Not safe for concurrent use.
type Random struct {
	passive
	rng *rand.Rand
}

// Choose returns a uniformly random candidate.
func (p *Random) Choose(_ time.Time, candidates []string, _ []Load) string {
	return candidates[p.rng.IntN(len(candidates))]
}

// Polling is the dissertation's random polling policy (§3.2.3, §3.3.2): poll
// d distinct random candidates, wait at most the discard deadline, and send
// to the answer with the shortest queue (ties broken at random); with no
// answer at all, pick at random. Not safe for concurrent use.
type Polling struct {
	passive
	rng  *rand.Rand
	d    int
	wait time.Duration
}

// Plan polls d distinct random candidates (all of them if fewer).
func (p *Polling) Plan(_ time.Time, candidates []string) Plan {
	return Plan{Poll: sample(p.rng, candidates, p.d), Wait: p.wait}
}

// Choose picks the least-loaded answer among the candidates.
func (p *Polling) Choose(_ time.Time, candidates []string, answers []Load) string {
	if r, ok := leastQueue(p.rng, candidates, answers); ok {
		return r
	}
	return candidates[p.rng.IntN(len(candidates))]
}

// sample returns k distinct elements of xs in random order (all of xs,
// shuffled, if k >= len(xs)). It does not modify xs.
func sample(rng *rand.Rand, xs []string, k int) []string {
	k = min(k, len(xs))
	out := make([]string, len(xs))
	copy(out, xs)
	for i := range k {
		j := i + rng.IntN(len(out)-i)
		out[i], out[j] = out[j], out[i]
	}
	return out[:k]
}

// leastQueue returns the replica of the answer with the smallest Queue among
// answers naming a candidate, breaking ties uniformly at random (reservoir
// sampling over the tied ones). ok is false when no answer names a candidate.
func leastQueue(rng *rand.Rand, candidates []string, answers []Load) (replica string, ok bool) {
	best, ties := 0, 0
	for _, a := range answers {
		if !slices.Contains(candidates, a.Replica) {
			continue
		}
		switch {
		case ties == 0 || a.Queue < best:
			replica, best, ties = a.Replica, a.Queue, 1
		case a.Queue == best:
			ties++
			if rng.IntN(ties) == 0 {
				replica = a.Replica
			}
		}
	}
	return replica, ties > 0
}

// leastBy returns the candidate with the smallest key, breaking ties
// uniformly at random (reservoir sampling); "" if there is none.
func leastBy(rng *rand.Rand, candidates []string, key func(string) int) string {
	pick, best, ties := "", 0, 0
	for _, c := range candidates {
		switch q := key(c); {
		case ties == 0 || q < best:
			pick, best, ties = c, q, 1
		case q == best:
			ties++
			if rng.IntN(ties) == 0 {
				pick = c
			}
		}
	}
	return pick
}

// RoundRobin cycles through the candidates in order. Not safe for concurrent
// use.
type RoundRobin struct {
	passive
	next int
}

// Choose returns the next candidate in turn.
func (p *RoundRobin) Choose(_ time.Time, candidates []string, _ []Load) string {
	r := candidates[p.next%len(candidates)]
	p.next = (p.next + 1) % len(candidates)
	return r
}

// reported keeps the last load each replica reported and sends to the least
// loaded candidate. Replicas that never reported count as idle, so a new
// replica gets traffic before its first report.
type reported struct {
	passive
	rng   *rand.Rand
	loads map[string]int
}

func newReported(rng *rand.Rand) reported {
	return reported{rng: rng, loads: map[string]int{}}
}

// Report records l as the replica's current load.
func (p *reported) Report(_ time.Time, l Load) { p.loads[l.Replica] = l.Queue }

// Choose picks the candidate with the least last-reported load, ties at random.
func (p *reported) Choose(_ time.Time, candidates []string, _ []Load) string {
	return leastBy(p.rng, candidates, func(c string) int { return p.loads[c] })
}

// Broadcast is the dissertation's broadcast policy (§3.2.2): replicas push
// their load at jittered intervals (Config.BroadcastInterval) and the client
// sends to the least load it last heard of. Between pushes every client
// flocks to the same replica, which is why it loses at long intervals. Not
// safe for concurrent use.
type Broadcast struct{ reported }

// Oracle is join-shortest-queue with exact global knowledge: the experiment
// harness must Report every replica's load whenever it changes (including
// requests in flight to it). It stands in for the dissertation's "ideal"
// policy and is for experiments only. Not safe for concurrent use.
type Oracle struct{ reported }

// LocalP2C is the power of two choices over the requests this client alone
// has outstanding at each replica (Sent minus Done) — what Envoy's and
// grpc-go's least-request balancers do. It needs no polls but is blind to
// other clients' load. Not safe for concurrent use.
type LocalP2C struct {
	passive
	rng         *rand.Rand
	outstanding map[string]int
}

// Sent counts a request as outstanding at replica.
func (p *LocalP2C) Sent(_ time.Time, replica string) { p.outstanding[replica]++ }

// Done counts a request to replica as finished.
func (p *LocalP2C) Done(_ time.Time, replica string, _ time.Duration) {
	if p.outstanding[replica] <= 1 {
		delete(p.outstanding, replica)
		return
	}
	p.outstanding[replica]--
}

// Choose samples two distinct candidates and returns the one with fewer
// outstanding requests, ties at random.
func (p *LocalP2C) Choose(_ time.Time, candidates []string, _ []Load) string {
	two := sample(p.rng, candidates, 2)
	if len(two) == 1 {
		return two[0]
	}
	a, b := p.outstanding[two[0]], p.outstanding[two[1]]
	if b < a || (a == b && p.rng.IntN(2) == 0) {
		return two[1]
	}
	return two[0]
}
