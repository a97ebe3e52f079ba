package client

import (
	"context"
	"errors"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/nerr"
)

// pause is the wait before retry number n (0 for the first), given how
// long the call has run and u, a uniform draw from [0, 1): the pause is
// in the upper half of min(Backoff·2ⁿ, MaxBackoff), cut to what is left
// of the budget. ok is false when no retry may start: retries are off,
// or the budget is spent. Pure: the shell draws u and reads the clock.
func pause(p config.RetryPolicy, n int, elapsed time.Duration, u float64) (d time.Duration, ok bool) {
	left := p.Budget - elapsed
	if p.Budget < 0 || left <= 0 {
		return 0, false
	}
	d = p.MaxBackoff
	if n < 30 {
		d = min(p.Backoff<<n, p.MaxBackoff)
	}
	d = d/2 + time.Duration(u*float64(d/2))
	return min(d, left), true
}

// retrying runs try until it succeeds, fails for good (not Retryable),
// ctx ends or the policy says stop, pausing on clk between tries. It
// returns the last try's answer: for a write, the last error carries the
// write's identity and whether it may have run (see request.outcome).
func retrying[T any](ctx context.Context, clk clock.Clock, p config.RetryPolicy, draw func() float64, onRetry func(), try func() (T, error)) (T, error) {
	start := clk.Now()
	for n := 0; ; n++ {
		out, err := try()
		if err == nil || !retried(err) || ctx.Err() != nil || p.FailFastOnOverload && errors.Is(err, nerr.ErrOverloaded) {
			return out, err
		}
		d, ok := pause(p, n, clk.Since(start), draw())
		if dl, has := ctx.Deadline(); !ok || has && !clk.Now().Add(d).Before(dl) {
			return out, err // no time for another try
		}
		select {
		case <-ctx.Done():
			return out, err
		case <-clk.After(d):
		}
		onRetry()
	}
}

// retried reports whether the policy tries err again: what
// nerr.Retryable allows, but a deadline the node reports for a call that
// never ran (the handler or the queue ran out of the call's time: a second
// try would too, as gRPC's own retry policies judge).
func retried(err error) bool {
	var u *nerr.UnknownOutcomeError
	if !errors.As(err, &u) && errors.Is(err, nerr.ErrDeadline) {
		return false
	}
	return nerr.Retryable(err)
}
