package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/nerr"
)

// RetryPolicy is how Call tries again after a call fails with an error
// that nerr.Retryable accepts (no live replica, no primary, overloaded, a
// stopping node, a write of unknown outcome that carries an identity;
// not a deadline the node reports, which a second try would meet too), so
// that a caller writes no retry loop. Every retry of a
// write carries the first attempt's identity: the write runs at most once
// in all, and the answer is the original result.
//
// Pauses grow from Backoff, doubling up to MaxBackoff, each drawn at
// random from its upper half (jitter, so clients cut off together do not
// come back in step). The call's context and WithTimeout bound the whole,
// as does Budget.
type RetryPolicy struct {
	// Budget bounds the time one Call spends, its retries included; no
	// retry starts after it. Zero takes the default (10 s); negative
	// turns retries off (each Call makes one try, the library's own
	// failover within it aside).
	Budget time.Duration
	// Backoff is the first pause (default 50 ms) and MaxBackoff the
	// longest (default 1 s).
	Backoff, MaxBackoff time.Duration
	// FailFastOnOverload returns an overloaded refusal at once instead of
	// retrying it: a proxy (the HTTP gateway) passes back-pressure on to
	// its own callers rather than holding their requests until the
	// deadline.
	FailFastOnOverload bool
}

// DefaultRetryPolicy is the policy of a client whose config names none
// through the public API (neptune.ClientConfig.Retry).
var DefaultRetryPolicy = RetryPolicy{Budget: 10 * time.Second, Backoff: 50 * time.Millisecond, MaxBackoff: time.Second}

// NoRetry makes one try per Call (the internal client's zero value).
var NoRetry = RetryPolicy{Budget: -1}

// WithDefaults fills zero fields from DefaultRetryPolicy; a negative
// Budget stays (retries off).
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.Budget == 0 {
		p.Budget = DefaultRetryPolicy.Budget
	}
	if p.Backoff <= 0 {
		p.Backoff = DefaultRetryPolicy.Backoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = max(DefaultRetryPolicy.MaxBackoff, p.Backoff)
	}
	return p
}

// Validate names the field that is wrong.
func (p RetryPolicy) Validate(field string) error {
	if p.Backoff < 0 || p.MaxBackoff < 0 {
		return fmt.Errorf("%s: Backoff and MaxBackoff must not be negative (got %v, %v)", field, p.Backoff, p.MaxBackoff)
	}
	if p.MaxBackoff > 0 && p.Backoff > p.MaxBackoff {
		return fmt.Errorf("%s: Backoff %v is above MaxBackoff %v", field, p.Backoff, p.MaxBackoff)
	}
	return nil
}

// pause is the wait before retry number n (0 for the first), given how
// long the call has run and u, a uniform draw from [0, 1): the pause is
// in the upper half of min(Backoff·2ⁿ, MaxBackoff), cut to what is left
// of the budget. ok is false when no retry may start: retries are off,
// or the budget is spent. Pure: the shell draws u and reads the clock.
func (p RetryPolicy) pause(n int, elapsed time.Duration, u float64) (d time.Duration, ok bool) {
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
func retrying[T any](ctx context.Context, clk clock.Clock, p RetryPolicy, draw func() float64, onRetry func(), try func() (T, error)) (T, error) {
	start := clk.Now()
	for n := 0; ; n++ {
		out, err := try()
		if err == nil || !retried(err) || ctx.Err() != nil || p.FailFastOnOverload && errors.Is(err, nerr.ErrOverloaded) {
			return out, err
		}
		d, ok := p.pause(n, clk.Since(start), draw())
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
