package balance

import (
	"math/rand/v2"
	"time"
)

// Prequal is the default poller, beyond the paper. It keeps the paper's
// synchronous poll of random replicas, with ProbeSize polls instead of 3 —
// with many independent clients, information per call is what separates
// polling from join-shortest-queue — and adds three ideas, the first two
// after Google's Prequal (Wydrowski et al., NSDI'24):
//
//   - Reuse: every answer (including late ones, fed back through Report)
//     stays in a pool for ReuseWindow, so a choice sees the fresh answers
//     plus the recent ones — more replicas than it polled. New polls go to
//     replicas the pool knows nothing fresh about.
//   - Correction: a pooled queue length is adjusted by this client's own
//     sends and completions to that replica since the answer, so reusing it
//     does not make the client flock to it.
//   - Slowness: the client learns each replica's per-request service time
//     from its own latencies (latency / (queue seen + 1), averaged in log
//     space) and scales the queue of a replica that is markedly slower than
//     the median, so a degraded replica gets proportionally less work.
//
// Not safe for concurrent use.
type Prequal struct {
	rng    *rand.Rand
	d      int
	enough int
	wait   time.Duration
	window time.Duration
	pool   map[string]*probe
	slow   speeds
	last   choice // the latest Choose, matched by the next Sent
}

type probe struct {
	queue      int
	at         time.Time // when the answer arrived
	sent, done int       // this client's sends and completions since
}

type choice struct {
	replica string
	queue   int
}

func newPrequal(cfg Config, rng *rand.Rand) *Prequal {
	return &Prequal{
		rng: rng, d: cfg.ProbeSize, enough: cfg.ProbeEnough, wait: cfg.PollWait(), window: cfg.ReuseWindow,
		pool: map[string]*probe{}, slow: speeds{},
	}
}

// Plan polls up to ProbeSize random candidates without a fresh pooled answer.
// It polls nobody when the pool is fresh for every candidate.
func (p *Prequal) Plan(now time.Time, candidates []string) Plan {
	stale := make([]string, 0, len(candidates))
	for _, c := range candidates {
		if !p.fresh(now, c) {
			stale = append(stale, c)
		}
	}
	if len(stale) == 0 {
		return Plan{}
	}
	return Plan{Poll: sample(p.rng, stale, p.d), Wait: p.wait, Enough: p.enough}
}

func (p *Prequal) fresh(now time.Time, replica string) bool {
	pr, ok := p.pool[replica]
	return ok && now.Sub(pr.at) <= p.window
}

// Choose pools the answers and picks the candidate with the least estimated
// cost among those with a fresh answer, ties at random; with none, a random
// candidate.
func (p *Prequal) Choose(now time.Time, candidates []string, answers []Load) string {
	for _, a := range answers {
		p.Report(now, a)
	}
	median := p.slow.median(candidates)
	pick, ties, best, bestQ := "", 0, 0.0, 0
	for _, c := range candidates {
		if !p.fresh(now, c) {
			continue
		}
		pr := p.pool[c]
		q := max(0, pr.queue+pr.sent-pr.done)
		cost := float64(q+1) * p.slow.factor(c, median)
		switch {
		case ties == 0 || cost < best:
			pick, best, bestQ, ties = c, cost, q, 1
		case cost == best:
			ties++
			if p.rng.IntN(ties) == 0 {
				pick, bestQ = c, q
			}
		}
	}
	if ties == 0 {
		pick, bestQ = candidates[p.rng.IntN(len(candidates))], -1
	}
	p.last = choice{replica: pick, queue: bestQ}
	return pick
}

// Sent counts the send against the replica's pooled answer and remembers
// the queue it was chosen at, to learn the replica's speed when it is Done.
func (p *Prequal) Sent(_ time.Time, replica string) {
	if pr := p.pool[replica]; pr != nil {
		pr.sent++
	}
	q := -1 // unknown: not chosen from an answer
	if p.last.replica == replica {
		q = p.last.queue
	}
	p.last = choice{}
	p.slow.sent(replica, q)
}

// Done counts the completion against the pooled answer and updates the
// replica's service-time estimate.
func (p *Prequal) Done(_ time.Time, replica string, latency time.Duration) {
	if pr := p.pool[replica]; pr != nil {
		pr.done++
	}
	p.slow.done(replica, latency)
}

// Report pools a poll answer (in time or late) or a pushed load, unless the
// pool already holds a newer one for that replica.
func (p *Prequal) Report(now time.Time, l Load) {
	if pr := p.pool[l.Replica]; pr != nil && pr.at.After(now) {
		return
	}
	p.pool[l.Replica] = &probe{queue: l.Queue, at: now}
}
