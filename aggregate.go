package neptune

import "github.com/neptune-cluster/neptune/internal/aggregation"

// Aggregation describes one Data Aggregation Call (Client.Aggregate):
// the service and its participating partitions, the operators and their
// parameters, the quality ρ and deadline T, the tree Scheme, hedging, the
// staged timeouts' ReduceBudget and the service class.
type Aggregation = aggregation.Aggregation

// AggregateResult is what an aggregation returns.
type AggregateResult = aggregation.Result

// AggregateStream is a streaming aggregation in flight
// (Client.AggregateStream).
type AggregateStream = aggregation.Stream

// AggregateProgress is one partial result of a streaming aggregation and
// its quality so far.
type AggregateProgress = aggregation.Progress

// Scheme selects how an aggregation's reduction tree is formed.
type Scheme = aggregation.Scheme

// Tree schemes (DAC §4.1–4.2).
const (
	// SchemeLAT, the default, is the load-adaptive tree: lightly loaded
	// nodes do more reductions, loaded ones become leaves; height O(log n).
	SchemeLAT = aggregation.SchemeLAT
	// SchemeBase: one fixed coordinator (the service's node with the
	// lowest id) gathers and reduces every partition.
	SchemeBase = aggregation.SchemeBase
	// SchemeFlat delegates all reductions to a random participant per call.
	SchemeFlat = aggregation.SchemeFlat
	// SchemeBinomial is a binomial tree with nodes placed at random.
	SchemeBinomial = aggregation.SchemeBinomial
)

// ParseScheme maps "lat", "base", "flat" or "binomial" to a Scheme.
func ParseScheme(name string) (Scheme, error) { return aggregation.ParseScheme(name) }

// AggregateStatus is the outcome of an aggregation.
type AggregateStatus = aggregation.Status

// Outcomes of an aggregation.
const (
	AggregateFailed  = aggregation.Failed
	AggregatePartial = aggregation.Partial
	AggregateFull    = aggregation.Full
)

// ErrBelowQuality means fewer partitions than the quality guarantee asks
// for contributed by the deadline. Retrying can help once the slow or
// failed nodes recover.
var ErrBelowQuality = aggregation.ErrBelowQuality
