package adapter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/neptune-cluster/neptune"
)

// Aggregation operators in the program's own process (DAC §4.3): a
// service declares them under aggregate (YAML key services[i].http.aggregate
// or services[i].exec.aggregate) and Client.Aggregate runs them like Go
// operators. The node runs them by asking the program, so an operator
// that crashes (an exit, a signal, a dropped connection) or hangs (killed
// or abandoned at its node's staged deadline) costs its partition's
// contribution, which the aggregation reports as missing, never the node.
//
// A local operator gets the call's LocalParams as its body (HTTP) or
// stdin (exec), the partition in Neptune-Partition or NEPTUNE_PARTITION,
// and answers with the partition's partial result. A reduce operator gets
// ReduceBody: the two partial results and the ReduceParams as three
// newline-delimited frames (AppendFrame), and answers with their
// reduction, which must be commutative and associative. Both learn which
// operator runs from Neptune-Operator / NEPTUNE_OPERATOR ("local" or
// "reduce") and Neptune-Method / NEPTUNE_METHOD (its name).

// HeaderOperator says which kind of aggregation operator a request to an
// HTTP program runs: "local" or "reduce".
const HeaderOperator = "Neptune-Operator"

// AggregateConfig declares a program's aggregation operators.
type AggregateConfig struct {
	Local  []OperatorConfig `yaml:"local"`
	Reduce []OperatorConfig `yaml:"reduce"`
}

// OperatorConfig maps one aggregation operator to the program.
type OperatorConfig struct {
	Name string `yaml:"name"`
	// Route is the HTTP path the node POSTs to (HTTP only).
	Route string `yaml:"route"`
	// Args replace the command's args for this operator (exec only).
	Args []string `yaml:"args"`
}

// validate checks the operators; where is the YAML path, e.g.
// "http.aggregate"; isHTTP says which fields apply.
func (a *AggregateConfig) validate(where string, isHTTP bool) error {
	if a == nil {
		return nil
	}
	if len(a.Local) == 0 || len(a.Reduce) == 0 {
		return fmt.Errorf("%s needs at least one local and one reduce operator", where)
	}
	for kind, ops := range [][]OperatorConfig{a.Local, a.Reduce} {
		kind := [...]string{"local", "reduce"}[kind]
		seen := map[string]bool{}
		for i, op := range ops {
			at := fmt.Sprintf("%s.%s[%d]", where, kind, i)
			switch {
			case op.Name == "":
				return fmt.Errorf("%s.name is required", at)
			case seen[op.Name]:
				return fmt.Errorf("%s.name: operator %q is listed twice", at, op.Name)
			case isHTTP && (len(op.Route) == 0 || op.Route[0] != '/'):
				return fmt.Errorf("%s.route %q must start with /", at, op.Route)
			case isHTTP && len(op.Args) > 0:
				return fmt.Errorf("%s.args is for exec services only", at)
			case !isHTTP && op.Route != "":
				return fmt.Errorf("%s.route is for http services only", at)
			}
			seen[op.Name] = true
		}
	}
	return nil
}

// ReduceBody is what a reduce operator gets: a, b and params as three
// newline-delimited frames.
func ReduceBody(a, b, params []byte) []byte {
	return AppendFrame(AppendFrame(AppendFrame(nil, a), b), params)
}

// ParseReduceBody is ReduceBody's inverse, for programs written in Go.
func ParseReduceBody(body []byte, max int) (a, b, params []byte, err error) {
	r := NewFrameReader(bytes.NewReader(body), max)
	var parts [3][]byte
	for i := range parts {
		if parts[i], err = r.Next(); err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: a reduce body has 3 frames, this one %d", ErrBadFrame, i)
			}
			return nil, nil, nil, err
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		return nil, nil, nil, fmt.Errorf("%w: a reduce body has 3 frames, this one more", ErrBadFrame)
	}
	return parts[0], parts[1], parts[2], nil
}

// aggregator builds the service's Aggregator: run executes one operator
// (kind "local" or "reduce", its config, the partition or -1, the body).
func (a *AggregateConfig) aggregator(run func(ctx context.Context, kind string, op OperatorConfig, partition int, body []byte) ([]byte, error)) *neptune.Aggregator {
	if a == nil {
		return nil
	}
	agg := &neptune.Aggregator{Local: map[string]neptune.LocalFunc{}, Reduce: map[string]neptune.ReduceFunc{}}
	for _, op := range a.Local {
		agg.Local[op.Name] = func(ctx context.Context, partition int, params []byte) ([]byte, error) {
			return run(ctx, "local", op, partition, params)
		}
	}
	for _, op := range a.Reduce {
		agg.Reduce[op.Name] = func(ctx context.Context, x, y, params []byte) ([]byte, error) {
			return run(ctx, "reduce", op, -1, ReduceBody(x, y, params))
		}
	}
	return agg
}

// operator runs an aggregation operator of an HTTP program: POST to its
// route, the answer's body its result; errors as a method's.
func (h *httpService) operator(ctx context.Context, kind string, op OperatorConfig, partition int, body []byte) ([]byte, error) {
	return h.send(ctx, http.MethodPost, op.Route, op.Name, partition, 0, body, kind)
}
