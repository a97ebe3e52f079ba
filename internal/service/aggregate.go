package service

import (
	"context"
	"errors"
	"fmt"
)

// LocalFunc is an aggregation's local operator: it computes one
// partition's contribution. It runs on one of the service's workers.
type LocalFunc func(ctx context.Context, partition int, params []byte) ([]byte, error)

// ReduceFunc combines two partial results into one. It must be commutative
// and associative: the reduction tree combines partial results in whatever
// order they arrive, and the result must not depend on it
// (dactest.CheckReducer checks a reducer on random inputs). Reductions are
// served before new local work on a node: they finish calls.
type ReduceFunc func(ctx context.Context, a, b, params []byte) ([]byte, error)

// Aggregator is a service's named aggregation operators, for Client.Aggregate
// (the Data Aggregation Call): every partition runs a Local operator and the
// partial results are combined pairwise by a Reduce operator along a
// reduction tree spread over the nodes.
type Aggregator struct {
	Local  map[string]LocalFunc
	Reduce map[string]ReduceFunc
}

func (a *Aggregator) validate() error {
	if len(a.Local) == 0 {
		return errors.New("Local is empty")
	}
	if len(a.Reduce) == 0 {
		return errors.New("Reduce is empty")
	}
	for name, f := range a.Local {
		if f == nil {
			return fmt.Errorf("Local[%q] is nil", name)
		}
	}
	for name, f := range a.Reduce {
		if f == nil {
			return fmt.Errorf("Reduce[%q] is nil", name)
		}
	}
	return nil
}
