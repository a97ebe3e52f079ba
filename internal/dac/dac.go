// Package dac is the pure core of the Data Aggregation Call (DAC, PPoPP'03):
// a scatter/gather over partitions where every partition runs a Local
// operator and the partial results are combined pairwise by a Reduce
// operator along a reduction tree, under an aggregation quality guarantee ρ
// and a soft deadline T.
//
// The package holds the request description and its result, the tree
// builders (Base, Flat, Binomial and the load-adaptive tree LAT), staged and
// uniform timeouts, and the per-request aggregation state machine a node
// steps with events (Machine). Nothing here does I/O, starts goroutines or
// reads the clock; the node runtime and the lab's simulator (lab/sim/dacsim)
// are the shells around it.
//
// Reduce operators must be commutative and associative: trees of any shape
// combine partial results in whatever order they arrive, and the result must
// not depend on it. dactest.CheckReducer checks a reducer on random inputs.
package dac

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Errors. ErrBelowQuality means too few partitions contributed by the
// deadline; retrying can help once the slow or failed nodes recover.
var (
	ErrBelowQuality = errors.New("dac: coverage below quality")
	ErrNoPartitions = errors.New("dac: no partitions")
	ErrScheme       = errors.New("dac: unknown tree scheme")
)

// Scheme selects how the reduction tree of one call is formed (§4.1–4.2).
type Scheme int

const (
	// LAT is the load-adaptive tree: lightly loaded servers do more
	// reductions and sit on longer paths; height O(log n). It is the default.
	LAT Scheme = iota
	// Base: the caller invokes every partition and reduces all results
	// itself, as a search coordinator does. The caller is the bottleneck.
	Base
	// Flat delegates all reductions of a call to one randomly chosen
	// participant, a different one per call.
	Flat
	// Binomial forms a binomial tree with servers placed at random.
	Binomial
)

var schemeNames = [...]string{LAT: "lat", Base: "base", Flat: "flat", Binomial: "binomial"}

func (s Scheme) String() string {
	if s < 0 || int(s) >= len(schemeNames) {
		return fmt.Sprintf("Scheme(%d)", int(s))
	}
	return schemeNames[s]
}

// ParseScheme maps "lat", "base", "flat" or "binomial" to a Scheme.
func ParseScheme(name string) (Scheme, error) {
	if i := slices.Index(schemeNames[:], name); i >= 0 {
		return Scheme(i), nil
	}
	return 0, fmt.Errorf("%w %q (want lat, base, flat or binomial)", ErrScheme, name)
}

// Request describes one aggregation call as the runtime sees it; the
// operators and their parameters travel separately.
type Request struct {
	Service string
	// Partitions are the participating partitions, one tree node each.
	Partitions []int
	// Quality is ρ: the fraction of partitions that must contribute for the
	// call to succeed, in (0, 1].
	Quality float64
	// Deadline is T, the soft deadline relative to the call's start.
	Deadline time.Duration
	Scheme   Scheme
}

// Validate reports the first invalid field.
func (r Request) Validate() error {
	switch {
	case r.Service == "":
		return errors.New("dac: Request.Service is empty")
	case len(r.Partitions) == 0:
		return fmt.Errorf("dac: Request.Partitions: %w", ErrNoPartitions)
	case !(r.Quality > 0 && r.Quality <= 1):
		return fmt.Errorf("dac: Request.Quality %v is not in (0, 1]", r.Quality)
	case r.Deadline <= 0:
		return fmt.Errorf("dac: Request.Deadline %v is not positive", r.Deadline)
	case r.Scheme < 0 || int(r.Scheme) >= len(schemeNames):
		return fmt.Errorf("dac: Request.Scheme: %w %d", ErrScheme, int(r.Scheme))
	}
	seen := make(map[int]bool, len(r.Partitions))
	for _, p := range r.Partitions {
		if seen[p] {
			return fmt.Errorf("dac: Request.Partitions lists partition %d twice", p)
		}
		seen[p] = true
	}
	return nil
}

// Needed is the least number of contributing partitions that meets ρ:
// ⌈ρ·n⌉, computed with a small tolerance so that ρ = 0.9, n = 10 needs 9.
func (r Request) Needed() int {
	return int(math.Ceil(r.Quality*float64(len(r.Partitions)) - 1e-9))
}

// Status is the outcome of a call.
type Status int

const (
	// StatusFailed: fewer than ⌈ρ·n⌉ partitions contributed.
	StatusFailed Status = iota
	// StatusPartial: the guarantee was met but some partitions are missing.
	StatusPartial
	// StatusFull: every partition contributed.
	StatusFull
)

func (s Status) String() string {
	switch s {
	case StatusFull:
		return "full"
	case StatusPartial:
		return "partial"
	default:
		return "failed"
	}
}

// Result is what a call returns: the status, the reduced data, the
// partitions that contributed to it and their fraction of the request.
type Result struct {
	Status       Status
	Data         any
	Contributing []int
	Coverage     float64
}

// Finish turns the partial result that reached the caller into the call's
// result. It fails with ErrBelowQuality when coverage is below ρ; the
// returned Result still reports what did arrive.
func Finish(r Request, p Partial) (Result, error) {
	parts := slices.Clone(p.Partitions)
	slices.Sort(parts)
	res := Result{Data: p.Data, Contributing: parts}
	if n := len(r.Partitions); n > 0 {
		res.Coverage = float64(len(parts)) / float64(n)
	}
	switch {
	case len(parts) < r.Needed():
		res.Status, res.Data = StatusFailed, nil
		return res, fmt.Errorf("%w: %d of %d partitions, need %d (ρ=%v)",
			ErrBelowQuality, len(parts), len(r.Partitions), r.Needed(), r.Quality)
	case len(parts) == len(r.Partitions):
		res.Status = StatusFull
	default:
		res.Status = StatusPartial
	}
	return res, nil
}

// RequestLoad is the load one queued aggregation request puts on a server
// (§4.5): s + π·a, where s is the mean local cost, a the mean reduction cost
// and π the number of reductions the server does for the request (its
// number of children in the tree). A server's load index is the sum over
// its queued requests.
func RequestLoad(s, a time.Duration, reductions int) time.Duration {
	return s + time.Duration(reductions)*a
}
