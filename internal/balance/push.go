package balance

import (
	"math/rand/v2"
	"slices"
	"time"
)

// Push chooses from loads the replicas pushed to this client, without
// polling: no call waits and no probe is sent. It serves two server-side
// push schemes (the simulator models both; nodes push on change, to the
// clients that subscribed through Plan.Subscribe):
//
//   - Join-idle-queue (Lu et al., Performance 2011): a replica that runs
//     out of work tells one random client (or a few) that it is idle. Each
//     such token is used once, so one idle replica draws one call per
//     client told, not a herd.
//   - Push on change: a replica pushes its queue to every client each
//     time it changes, so the table is at most one datagram stale.
//
// With Config.IdleTokens (join-idle-queue), Choose takes an unused idle
// token if it holds one (the newest: the least likely to be stale); else,
// and always without tokens, the replica with the least pushed queue,
// corrected by this client's own sends and completions since the push,
// ties at random; a replica never heard of counts as queue 0 corrected
// the same way. Not safe for concurrent use.
type Push struct {
	rng    *rand.Rand
	tokens bool              // keep idle tokens (Config.IdleTokens)
	loads  map[string]*probe // last pushed queue, with own traffic since
	idle   []string          // unused idle tokens, oldest first
	ownOut map[string]int    // own requests in flight, for replicas never heard of
}

func newPush(rng *rand.Rand, tokens bool) *Push {
	return &Push{rng: rng, tokens: tokens, loads: map[string]*probe{}, ownOut: map[string]int{}}
}

// Plan never polls: it keeps every candidate's pushes subscribed.
func (*Push) Plan(_ time.Time, candidates []string) Plan { return Plan{Subscribe: candidates} }

// Choose spends the newest idle token naming a candidate, else picks the
// least corrected queue.
func (p *Push) Choose(now time.Time, candidates []string, answers []Load) string {
	for _, a := range answers {
		p.Report(now, a)
	}
	for i := len(p.idle) - 1; i >= 0; i-- {
		r := p.idle[i]
		if !slices.Contains(candidates, r) {
			continue
		}
		p.idle = slices.Delete(p.idle, i, i+1)
		return r
	}
	return leastBy(p.rng, candidates, func(c string) int {
		if l := p.loads[c]; l != nil {
			return max(0, l.queue+l.sent-l.done)
		}
		return p.ownOut[c]
	})
}

// Sent counts the request against the replica's pushed queue.
func (p *Push) Sent(_ time.Time, replica string) {
	p.ownOut[replica]++
	if l := p.loads[replica]; l != nil {
		l.sent++
	}
}

// Done counts the completion against the replica's pushed queue.
func (p *Push) Done(_ time.Time, replica string, _ time.Duration) {
	if p.ownOut[replica] <= 1 {
		delete(p.ownOut, replica)
	} else {
		p.ownOut[replica]--
	}
	if l := p.loads[replica]; l != nil {
		l.done++
	}
}

// Report records a pushed queue; a queue of 0 is also an idle token.
func (p *Push) Report(now time.Time, l Load) {
	p.loads[l.Replica] = &probe{queue: l.Queue, at: now}
	if !p.tokens {
		return
	}
	if l.Queue == 0 {
		p.idle = append(p.idle, l.Replica)
	} else {
		// The replica is busy again: its older tokens are void.
		p.idle = slices.DeleteFunc(p.idle, func(r string) bool { return r == l.Replica })
	}
}
