package balance

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"time"
)

// Defaults of the async policy's knobs (Config.ProbeRate and the fields
// after it), from a sweep in the simulator (docs/experiments/lb.md, "Async
// probes"): at 16 clients no setting came near prequal, and with one busy
// client these match it with half its polls.
const (
	defaultProbeRate   = 3
	defaultPoolSize    = 16
	defaultProbeAge    = 50 * time.Millisecond
	defaultProbeReuse  = 2
	defaultHotQuantile = 0.8
)

// freshFraction: a replica that answered less than ProbeAge/freshFraction
// ago is not probed again, even if its answer is used up. A client calling far more
// often than the cluster changes (sequential calls ~250 µs apart on
// loopback) would otherwise probe every replica on every call, paying
// the datagrams' CPU for answers it already has.
const freshFraction = 10

// Async keeps polling off the call path, after Google's Prequal (Wydrowski
// et al., NSDI'24). Every call asks the shell to probe ProbeRate random
// replicas asynchronously (Plan.Probe) and chooses at once from a pool of
// earlier answers, so probing follows the request rate and no call waits
// for a poll:
//
//   - Pool: at most PoolSize answers, one per replica, the oldest evicted
//     first; an answer leaves when it is older than ProbeAge or has chosen
//     ProbeReuse calls, so one answer cannot draw a burst of calls.
//   - Correction: a pooled requests-in-flight count (RIF, the queue the
//     replica answered) is adjusted by this client's own sends and
//     completions to that replica since the answer.
//   - Hot-cold rule: a replica is hot when its RIF is at or above the
//     HotQuantile quantile of the pool's RIFs. Among the cold ones the
//     lowest estimated latency wins, else (all hot) the lowest RIF; ties
//     at random. The latency estimate is (RIF + 1) × the replica's
//     per-request time as this client learned it (speeds): Prequal's
//     servers report a latency, ours report only their queue.
//   - Empty pool (the first call, or every answer used up or aged out):
//     the candidate with the fewest of this client's own requests in
//     flight, ties at random, rather than waiting.
//
// Not safe for concurrent use.
type Async struct {
	rng   *rand.Rand
	rate  float64
	size  int
	age   time.Duration
	reuse int
	hot   float64
	pool  []*pooled // in arrival order, oldest first
	own   map[string]int
	// probing is when each replica was last asked and has not answered
	// since: one probe in flight per replica, so a client calling far
	// more often than a probe's round trip does not flood its replicas.
	probing map[string]time.Time
	// answered is when each replica last answered, whether or not its
	// answer is still pooled (ProbeReuse may have used it up).
	answered map[string]time.Time
	slow     speeds
	last     choice
}

// pooled is one probe answer in the pool.
type pooled struct {
	replica    string
	rif        int
	at         time.Time // when the answer arrived
	uses       int       // calls it chose
	sent, done int       // this client's sends and completions since
}

// corrected is the answer's RIF adjusted by this client's own traffic since.
func (p *pooled) corrected() int { return max(0, p.rif+p.sent-p.done) }

func newAsync(cfg Config, rng *rand.Rand) *Async {
	return &Async{
		rng:      rng,
		rate:     cmp.Or(cfg.ProbeRate, defaultProbeRate),
		size:     cmp.Or(cfg.PoolSize, defaultPoolSize),
		age:      cmp.Or(cfg.ProbeAge, defaultProbeAge),
		reuse:    cmp.Or(cfg.ProbeReuse, defaultProbeReuse),
		hot:      cmp.Or(cfg.HotQuantile, defaultHotQuantile),
		own:      map[string]int{},
		probing:  map[string]time.Time{},
		answered: map[string]time.Time{},
		slow:     speeds{},
	}
}

// Plan asks for ProbeRate asynchronous probes on average (the fraction
// rounded at random), to random candidates without a pooled answer first,
// never to one whose last probe is still unanswered (and younger than
// ProbeAge: a lost answer does not silence a replica for good), nor to
// one that answered less than ProbeAge/freshFraction ago. It never asks
// the caller to wait.
func (a *Async) Plan(now time.Time, candidates []string) Plan {
	a.expire(now)
	n := int(a.rate)
	if a.rng.Float64() < a.rate-float64(n) {
		n++
	}
	if n == 0 {
		return Plan{}
	}
	unknown := make([]string, 0, len(candidates))
	var known []string
	for _, c := range candidates {
		if at, ok := a.probing[c]; ok && now.Sub(at) <= a.age {
			continue
		}
		if at, ok := a.answered[c]; ok && now.Sub(at) < a.age/freshFraction {
			continue
		}
		if a.find(c) < 0 {
			unknown = append(unknown, c)
		} else {
			known = append(known, c)
		}
	}
	probe := sample(a.rng, unknown, n)
	if len(probe) < n {
		probe = append(probe, sample(a.rng, known, n-len(probe))...)
	}
	for _, c := range probe {
		a.probing[c] = now
	}
	return Plan{Probe: probe}
}

// Choose pools any answers it is given (a shell may still poll
// synchronously, e.g. for a level-3 read) and picks by the hot-cold rule
// among the candidates with a pooled answer; with none, the candidate with
// the fewest of this client's requests in flight.
func (a *Async) Choose(now time.Time, candidates []string, answers []Load) string {
	for _, l := range answers {
		a.Report(now, l)
	}
	a.expire(now)
	var usable []*pooled
	for _, p := range a.pool {
		if slices.Contains(candidates, p.replica) {
			usable = append(usable, p)
		}
	}
	if len(usable) == 0 {
		pick := a.leastInFlight(candidates)
		a.last = choice{replica: pick, queue: -1}
		return pick
	}
	rifs := make([]int, len(usable))
	for i, p := range usable {
		rifs[i] = p.corrected()
	}
	slices.Sort(rifs)
	threshold := rifs[int(a.hot*float64(len(rifs)-1))]
	median := a.slow.median(candidates)
	var best *pooled
	bestCold, bestKey, ties := false, 0.0, 0
	for _, p := range usable {
		rif := p.corrected()
		cold := rif < threshold
		key := float64(rif) // hot: lowest RIF
		if cold {
			key = float64(rif+1) * a.slow.factor(p.replica, median) // cold: lowest latency
		}
		switch {
		case best == nil || (cold && !bestCold) || (cold == bestCold && key < bestKey):
			best, bestCold, bestKey, ties = p, cold, key, 1
		case cold == bestCold && key == bestKey:
			ties++
			if a.rng.IntN(ties) == 0 {
				best = p
			}
		}
	}
	a.last = choice{replica: best.replica, queue: best.corrected()}
	if best.uses++; best.uses >= a.reuse {
		a.remove(best)
	}
	return best.replica
}

// leastInFlight is the candidate with the fewest of this client's own
// requests in flight, ties at random.
func (a *Async) leastInFlight(candidates []string) string {
	return leastBy(a.rng, candidates, func(c string) int { return a.own[c] })
}

// Sent counts the request against the replica's pooled answer and its
// requests in flight, and remembers the RIF it was chosen at, to learn the
// replica's speed when it is Done.
func (a *Async) Sent(_ time.Time, replica string) {
	a.own[replica]++
	if i := a.find(replica); i >= 0 {
		a.pool[i].sent++
	}
	q := -1 // unknown: not chosen from an answer
	if a.last.replica == replica {
		q = a.last.queue
	}
	a.last = choice{}
	a.slow.sent(replica, q)
}

// Done counts the completion against the pooled answer and the replica's
// requests in flight, and updates its service-time estimate.
func (a *Async) Done(_ time.Time, replica string, latency time.Duration) {
	if a.own[replica] <= 1 {
		delete(a.own, replica)
	} else {
		a.own[replica]--
	}
	if i := a.find(replica); i >= 0 {
		a.pool[i].done++
	}
	a.slow.done(replica, latency)
}

// Report pools a probe answer (or any load learned out of band), replacing
// the replica's older one; a full pool evicts its oldest answer.
func (a *Async) Report(now time.Time, l Load) {
	delete(a.probing, l.Replica)
	a.answered[l.Replica] = now
	if i := a.find(l.Replica); i >= 0 {
		if a.pool[i].at.After(now) {
			return
		}
		a.pool = slices.Delete(a.pool, i, i+1)
	}
	if len(a.pool) >= a.size {
		a.pool = slices.Delete(a.pool, 0, len(a.pool)-a.size+1)
	}
	a.pool = append(a.pool, &pooled{replica: l.Replica, rif: l.Queue, at: now})
}

// expire drops answers older than the age limit, and forgets answers
// too old to hold back a probe.
func (a *Async) expire(now time.Time) {
	a.pool = slices.DeleteFunc(a.pool, func(p *pooled) bool { return now.Sub(p.at) > a.age })
	for r, at := range a.answered {
		if now.Sub(at) >= a.age/freshFraction {
			delete(a.answered, r)
		}
	}
}

func (a *Async) find(replica string) int {
	return slices.IndexFunc(a.pool, func(p *pooled) bool { return p.replica == replica })
}

func (a *Async) remove(p *pooled) {
	a.pool = slices.DeleteFunc(a.pool, func(q *pooled) bool { return q == p })
}
