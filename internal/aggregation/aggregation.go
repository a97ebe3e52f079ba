// Package aggregation is the runtime of the Data Aggregation Call (DAC):
// the caller's side (Caller: look the partitions up, poll their nodes,
// build the reduction tree with internal/dac, send the root its subtree)
// and the node's side (Server: run this node's part of the tree, forward
// the children's subtrees, reduce what arrives by the staged deadline).
// Both sides share the hedged sending of a subtree to a replica (hedge.go).
// The pure policy (trees, staged deadlines, the node machine, the ledger)
// is internal/dac; the operators are the service's (service.Aggregator).
package aggregation

import (
	"errors"
	"fmt"
	"time"

	"github.com/neptune-cluster/neptune/internal/dac"
)

// Scheme selects how an aggregation's reduction tree is formed.
type Scheme = dac.Scheme

// Tree schemes (DAC §4.1–4.2).
const (
	// SchemeLAT, the default, is the load-adaptive tree: lightly loaded
	// nodes do more reductions, loaded ones become leaves; height O(log n).
	SchemeLAT = dac.LAT
	// SchemeBase: one fixed coordinator (the service's node with the
	// lowest id) gathers and reduces every partition, as a search front end
	// does.
	SchemeBase = dac.Base
	// SchemeFlat delegates all reductions to a random participant per call.
	SchemeFlat = dac.Flat
	// SchemeBinomial is a binomial tree with nodes placed at random.
	SchemeBinomial = dac.Binomial
)

// ParseScheme maps "lat", "base", "flat" or "binomial" to a Scheme.
func ParseScheme(name string) (Scheme, error) { return dac.ParseScheme(name) }

// Status is the outcome of an aggregation.
type Status = dac.Status

// Outcomes of an aggregation.
const (
	Failed  = dac.StatusFailed
	Partial = dac.StatusPartial
	Full    = dac.StatusFull
)

// ErrBelowQuality means fewer partitions than the quality guarantee asks
// for contributed by the deadline. Retrying can help once the slow or
// failed nodes recover.
var ErrBelowQuality = dac.ErrBelowQuality

// Aggregation describes one Data Aggregation Call.
type Aggregation struct {
	Service string
	// Partitions are the participating partitions.
	Partitions []int
	// Local and Reduce name the service's operators (Aggregator).
	Local, Reduce             string
	LocalParams, ReduceParams []byte
	// Quality is ρ, the fraction of partitions that must contribute, in
	// (0, 1]. Default 1.
	Quality float64
	// Deadline is T: the call returns within about T with whatever met
	// the guarantee. Required.
	Deadline time.Duration
	// Scheme is the reduction tree; default SchemeLAT.
	Scheme Scheme
	// Hedge re-issues a leaf partition slower than the recent p95 to another
	// replica when the deadline allows; at most about 5% extra executions.
	Hedge bool
	// ReduceBudget is the time staged timeouts reserve per reduction (§4.4
	// a). Zero uses 4× the mean reduction time this client has seen (p98
	// for exponential costs), or T/40 before any.
	ReduceBudget time.Duration
	// Class is the service class the operators run under.
	Class string
	// Polls is how many of the call's nodes are polled for their load
	// afresh; the others' loads are what earlier polls said, corrected by
	// their age. Zero uses the caller's default (8). A large call's LAT
	// tree is only as good as its loads are fresh (docs/experiments/dac.md,
	// "DAC at scale"): Polls at least the number of partitions polls every
	// node, at two messages each.
	Polls int
}

// Experiment selects the paper's baselines, which only experiments run;
// product code leaves it zero (the public API cannot set it).
type Experiment struct {
	// UniformTimeouts gives every node the call's deadline instead of the
	// staged deadlines of §4.4 (the paper's baseline).
	UniformTimeouts bool
	// Blocking makes every node hold one worker for its whole part of the
	// call, waiting for its children included, instead of releasing it
	// between operators: the paper's NoED baseline (§5.4).
	Blocking bool
}

// Validate reports the first invalid field.
func (a Aggregation) Validate() error {
	switch {
	case a.Local == "":
		return errors.New("neptune: Aggregation.Local is empty")
	case a.Reduce == "":
		return errors.New("neptune: Aggregation.Reduce is empty")
	case a.ReduceBudget < 0:
		return fmt.Errorf("neptune: Aggregation.ReduceBudget %v is negative", a.ReduceBudget)
	case a.Polls < 0:
		return fmt.Errorf("neptune: Aggregation.Polls %d is negative", a.Polls)
	}
	if err := a.request().Validate(); err != nil {
		return fmt.Errorf("neptune: Aggregation: %w", err)
	}
	return nil
}

func (a Aggregation) request() dac.Request {
	q := a.Quality
	if q == 0 {
		q = 1
	}
	return dac.Request{Service: a.Service, Partitions: a.Partitions, Quality: q, Deadline: a.Deadline, Scheme: a.Scheme}
}

// Result is what an aggregation returns.
type Result struct {
	Status Status
	// Data is the reduced result of the contributing partitions.
	Data []byte
	// Contributing are the partitions in Data, sorted.
	Contributing []int
	// Coverage is len(Contributing) / len(Partitions).
	Coverage float64
	// Hedges is how many partitions were re-issued to another replica.
	Hedges int
}

func ints(xs []int32) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x)
	}
	return out
}

func int32s(xs []int) []int32 {
	out := make([]int32, len(xs))
	for i, x := range xs {
		out[i] = int32(x)
	}
	return out
}

func bytesOf(d any) []byte {
	b, _ := d.([]byte)
	return b
}

// recoverInto turns an operator's panic into its error, so one bad call
// cannot take the node down.
func recoverInto(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("neptune: handler panicked: %v", r)
	}
}
