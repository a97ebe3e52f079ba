package client

import (
	"context"

	"github.com/neptune-cluster/neptune/internal/aggregation"
	"github.com/neptune-cluster/neptune/internal/service"
)

// Pending is a call in flight (Client.Go, Client.GoAggregate): the
// caller waits on it, selects on Done or cancels it, and may have any
// number in flight from one goroutine. The call runs on a goroutine of
// its own under a context that Cancel ends.
type Pending[T any] struct {
	done   chan struct{}
	cancel context.CancelFunc
	val    T
	err    error
}

// start runs f under a cancellable child of ctx and returns its handle.
func start[T any](ctx context.Context, f func(context.Context) (T, error)) *Pending[T] {
	ctx, cancel := context.WithCancel(ctx)
	p := &Pending[T]{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(p.done)
		defer cancel()
		p.val, p.err = f(ctx)
	}()
	return p
}

// Done is closed once the call has ended; Wait then returns at once.
func (p *Pending[T]) Done() <-chan struct{} { return p.done }

// Wait waits for the call to end and returns what it returned.
func (p *Pending[T]) Wait() (T, error) {
	<-p.done
	return p.val, p.err
}

// Cancel ends the call's context: a call not yet sent never runs; a write
// already sent ends with an error saying its outcome is unknown (as a
// Call whose context ends). Wait still returns what the call returned.
func (p *Pending[T]) Cancel() { p.cancel() }

// Go starts a Call and returns its handle at once.
func (c *Client) Go(ctx context.Context, svc string, partition int, method string, body []byte, opts ...Option) *Pending[*service.Response] {
	return start(ctx, func(ctx context.Context) (*service.Response, error) {
		return c.Call(ctx, svc, partition, method, body, opts...)
	})
}

// GoAggregate starts an aggregation and returns its handle at once.
func (c *Client) GoAggregate(ctx context.Context, a aggregation.Aggregation, exp aggregation.Experiment) *Pending[*aggregation.Result] {
	return start(ctx, func(ctx context.Context) (*aggregation.Result, error) {
		return c.Aggregate(ctx, a, exp)
	})
}
