package balance

import (
	"math"
	"slices"
	"time"
)

// speeds learns each replica's per-request service time from this client's
// own requests: latency / (queue seen + 1), averaged in log space (an EWMA),
// so a degraded replica can be told from a busy one. Both pollers use it.
type speeds map[string]*replicaStats

// replicaStats learns a replica's service time from this client's requests.
type replicaStats struct {
	pending []int   // estimated queue ahead of each outstanding request, FIFO
	logSvc  float64 // EWMA of log(latency/(queue+1) in seconds)
	samples int
}

// slowEWMA weighs a new service-time sample; high, because samples of a
// replica are rare and a degraded one must be noticed after few requests.
// Averaging logarithms keeps one long request of a high-variance service
// from branding a healthy replica slow.
const slowEWMA = 0.3

// slowMinSamples is how many samples a replica needs before it can be
// judged slow.
const slowMinSamples = 2

// slowThreshold is how much slower than the median a replica must look before
// its queue is scaled; below it, estimation noise would only reorder healthy
// replicas at random.
const slowThreshold = 5.0

// sent records a request to replica chosen at an estimated queue q (-1:
// unknown, so its latency teaches nothing).
func (s speeds) sent(replica string, q int) {
	st := s[replica]
	if st == nil {
		st = &replicaStats{}
		s[replica] = st
	}
	st.pending = append(st.pending, q)
}

// done records the latency of replica's oldest outstanding request.
func (s speeds) done(replica string, latency time.Duration) {
	st := s[replica]
	if st == nil || len(st.pending) == 0 {
		return
	}
	q := st.pending[0]
	st.pending = st.pending[1:]
	if q < 0 {
		return
	}
	sample := math.Log(max(latency.Seconds(), 1e-9) / float64(q+1))
	if st.samples == 0 {
		st.logSvc = sample
	} else {
		st.logSvc += slowEWMA * (sample - st.logSvc)
	}
	st.samples++
}

// median is the median learned log service time over candidates with
// enough samples; +Inf if none has, so that nobody is judged slow.
func (s speeds) median(candidates []string) float64 {
	var known []float64
	for _, c := range candidates {
		if st := s[c]; st != nil && st.samples >= slowMinSamples {
			known = append(known, st.logSvc)
		}
	}
	if len(known) == 0 {
		return math.Inf(1)
	}
	slices.Sort(known)
	return known[len(known)/2]
}

// factor is how many times slower than the median (a log service time, from
// median) replica is, if markedly so (slowThreshold); 1 otherwise.
func (s speeds) factor(replica string, median float64) float64 {
	if st := s[replica]; st != nil && st.samples >= slowMinSamples && st.logSvc-median > math.Log(slowThreshold) {
		return math.Exp(st.logSvc - median)
	}
	return 1
}
