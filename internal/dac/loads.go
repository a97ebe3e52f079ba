package dac

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Known is what a caller knows of one server's load without asking it
// now: the load index (time per processor) the server last reported,
// through a poll or an announcement, and when.
type Known struct {
	Load time.Duration
	// At is when the server measured Load; zero means never heard of.
	At time.Time
}

// Seen reports whether the server's load was ever learned.
func (k Known) Seen() bool { return !k.At.IsZero() }

// DefaultPolls is the default number of fresh polls per call (k). A call
// over at most this many nodes polls them all, as before: every cluster
// Neptune has been measured on (up to 32 nodes) keeps exact loads and
// LAT's latency. A larger call polls k and estimates the rest (§4.5 (2),
// "randomly polls load information from a few nodes"), trading latency
// for messages: at 900 nodes, k = 8, LAT is 1.74× slower than with exact
// loads for 112× fewer messages (docs/experiments/dac.md).
const DefaultPolls = 32

// SimPolls is the k of the simulator's figures at 900 nodes.
const SimPolls = 8

// PickPolls returns which servers a call polls: at most k of them, those
// never heard of first, the rest at random (§4.5 (2)). Every other server's
// load is estimated from what is known (Estimate). With k ≥ len(known)
// every server is polled, as a small call should. The result is sorted.
func PickPolls(known []Known, k int, r *rand.Rand) []int {
	n := len(known)
	if k >= n {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	if k <= 0 {
		return nil
	}
	var unseen, seen []int
	for i, kn := range known {
		if kn.Seen() {
			seen = append(seen, i)
		} else {
			unseen = append(unseen, i)
		}
	}
	r.Shuffle(len(unseen), func(a, b int) { unseen[a], unseen[b] = unseen[b], unseen[a] })
	r.Shuffle(len(seen), func(a, b int) { seen[a], seen[b] = seen[b], seen[a] })
	out := append(unseen, seen...)[:k]
	slices.Sort(out)
	return out
}

// Estimate returns the load the tree builder uses for each server at now
// (§4.5 (2), controlled random correction): the known load plus a random
// correction whose deviation grows with the load's age, from 0 for a
// fresh one to the spread of the known loads for one horizon old or older
// (a report that old says no more about the server than the population
// does). A server never heard of reads as the mean load plus that full
// correction. The correction keeps the calls between two reports from all
// making the same lightly loaded servers interior (the flocking effect);
// loads are never negative.
func Estimate(known []Known, now time.Time, horizon time.Duration, r *rand.Rand) []time.Duration {
	var sum, sq float64
	seen := 0
	for _, kn := range known {
		if kn.Seen() {
			x := float64(kn.Load)
			sum, sq, seen = sum+x, sq+x*x, seen+1
		}
	}
	var mean, spread float64
	if seen > 0 {
		mean = sum / float64(seen)
		spread = math.Sqrt(max(sq/float64(seen)-mean*mean, 0))
	}
	out := make([]time.Duration, len(known))
	for i, kn := range known {
		base, staleness := mean, 1.0
		if kn.Seen() {
			age := max(now.Sub(kn.At), 0)
			base = float64(kn.Load)
			if horizon > 0 && age < horizon {
				staleness = float64(age) / float64(horizon)
			}
		}
		x := base
		if dev := spread * staleness; dev > 0 {
			x += r.NormFloat64() * dev
		}
		out[i] = time.Duration(max(x, 0))
	}
	return out
}
