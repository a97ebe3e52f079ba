package client

import (
	"context"
	"errors"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport"
)

// A call retries at two levels, each decided by a pure function here so
// that every error kind, identity and budget is a row of a table test
// (retry_test.go, failover_test.go), and the shells (Client.call,
// retrying) only wait and send:
//
//   - the attempt loop (afterFailure): after a failed attempt, try another
//     replica at once, pause while the partition is between primaries, or
//     give up; a write without an identity is never sent twice once it may
//     have run;
//   - the retry policy (retryAfter): once the attempt loop gave up with a
//     retryable error, pause and run the whole call again, within the
//     policy's budget and the call's deadline.

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

// retryAfter decides whether the policy runs a call again after try n (0
// for the first) failed with err, elapsed into the call, with left until
// the call's deadline if it has one and u a uniform draw from [0, 1): the
// pause before the retry, or false (err is the call's answer). A retry
// must start before the deadline; the budget and the policy's error kinds
// (retried) decide the rest.
func retryAfter(p config.RetryPolicy, err error, n int, elapsed, left time.Duration, hasDeadline bool, u float64) (time.Duration, bool) {
	if err == nil || !retried(err) || p.FailFastOnOverload && errors.Is(err, nerr.ErrOverloaded) {
		return 0, false
	}
	d, ok := pause(p, n, elapsed, u)
	if !ok || hasDeadline && d >= left {
		return 0, false // no time for another try
	}
	return d, true
}

// retrying runs try until it succeeds, fails for good, ctx ends or the
// policy says stop (retryAfter), pausing on clk between tries. It returns
// the last try's answer: for a write, the last error carries the write's
// identity and whether it may have run (see request.outcome).
func retrying[T any](ctx context.Context, clk clock.Clock, p config.RetryPolicy, draw func() float64, onRetry func(), try func() (T, error)) (T, error) {
	start := clk.Now()
	for n := 0; ; n++ {
		out, err := try()
		if err == nil || ctx.Err() != nil {
			return out, err
		}
		dl, has := ctx.Deadline()
		d, ok := retryAfter(p, err, n, clk.Since(start), dl.Sub(clk.Now()), has, draw())
		if !ok {
			return out, err
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

// A call that meets a partition between primaries retries for at most
// maxPrimaryWait (failover takes well under a second), pausing
// primaryRetryPause, doubling, between tries; an identified write, whose
// retries are safe, keeps trying for maxIdentifiedWait (a primary killed
// under load may take a few seconds to be replaced), within the call's
// deadline.
const (
	maxPrimaryWait    = 2 * time.Second
	maxIdentifiedWait = 8 * time.Second
	primaryRetryPause = 25 * time.Millisecond
)

// A failover decision says what the call does after a failed attempt.
// Pure, so each error kind's handling is a row of a table test.
type decision struct {
	giveUp  bool // the error is the call's answer
	exclude bool // the node is unreachable or stopping: leave it out of the view until it announces itself again
	count   bool // the attempt counts toward maxAttempts
	wait    waitRule
}

// waitRule says when the call pauses (failoverPause) before the next try.
type waitRule int

const (
	waitNever    waitRule = iota // try at once; give up after maxAttempts counted attempts
	waitAfterMax                 // try at once, then pause once maxAttempts are spent
	waitAlways                   // pause before every try, within the wait budget
)

// failover decides what follows an attempt that failed with err, for a
// write or a read, with or without an identity. A write without one is
// never sent again once it may have run.
func failover(err error, write, identified bool) decision {
	switch {
	case errors.Is(err, errPrimaryMoved):
		// Sent again to the new primary: safe, the attempt given up was a
		// read or an identified write.
		return decision{count: true, wait: waitAfterMax}
	case transport.IsTransport(err):
		// The node is unreachable: another replica takes the call.
		if write && !identified {
			return decision{giveUp: true, exclude: true} // it may have run: no blind resend
		}
		if write {
			return decision{exclude: true, count: true, wait: waitAfterMax}
		}
		return decision{exclude: true, count: true}
	case write && identified && errors.Is(err, nerr.ErrUnknownOutcome):
		// A forward to a dying primary failed: the partition is electing
		// another. The retry carries the same identity.
		return decision{wait: waitAlways}
	case errors.Is(err, nerr.ErrClosed) && !errors.Is(err, nerr.ErrUnknownOutcome):
		// The node is stopping and refused the call (it never ran):
		// another replica takes it.
		return decision{exclude: true, count: true}
	case betweenPrimaries(err, modeOf(write)):
		// The partition is electing a primary (a write that gets this
		// answer never ran): wait a little, then ask again.
		return decision{wait: waitAlways}
	}
	return decision{giveUp: true}
}

func modeOf(write bool) service.Mode {
	if write {
		return service.Write
	}
	return service.Read
}

// attempts is what a call's attempt loop has spent: the attempts that
// count toward maxAttempts, and the time it paused.
type attempts struct {
	failed int
	waited time.Duration
}

// waitBudget is how long the attempt loop may pause in all: an identified
// write, whose re-sends are safe, waits longer for a new primary.
func waitBudget(write, identified bool) time.Duration {
	if write && identified {
		return maxIdentifiedWait
	}
	return maxPrimaryWait
}

// wait is the next pause within budget and the state after it; false
// once the budget is spent.
func (a attempts) wait(budget time.Duration) (time.Duration, attempts, bool) {
	d, ok := failoverPause(a.failed, a.waited, budget)
	if ok {
		a.waited += d
	}
	return d, a, ok
}

// step is what the attempt loop does after a failed attempt: give up
// (the error is the call's answer) or try again after pause (0: at once);
// exclude leaves the node out of the view either way.
type step struct {
	giveUp, exclude bool
	pause           time.Duration
}

// afterFailure decides what follows an attempt that failed with err, for
// a write or a read, with or without an identity, given what the loop
// has spent (a), and returns the loop's state for the next try: failover
// says how the error kind is handled; the attempts (maxAttempts) and the
// wait budget (waitBudget) bound how long.
func afterFailure(err error, write, identified bool, a attempts) (step, attempts) {
	d := failover(err, write, identified)
	if d.giveUp {
		return step{giveUp: true, exclude: d.exclude}, a
	}
	if d.count {
		a.failed++
	}
	switch {
	case d.wait == waitAlways, d.wait == waitAfterMax && a.failed >= maxAttempts:
		p, next, ok := a.wait(waitBudget(write, identified))
		if !ok {
			return step{giveUp: true, exclude: d.exclude}, a
		}
		return step{exclude: d.exclude, pause: p}, next
	case a.failed >= maxAttempts:
		return step{giveUp: true, exclude: d.exclude}, a
	}
	return step{exclude: d.exclude}, a
}

// failoverPause is the pause before the next try after failed counted
// attempts and waited in pauses so far, doubling from primaryRetryPause up
// to 8 times it, cut to the budget; false once the budget is spent.
func failoverPause(failed int, waited, budget time.Duration) (time.Duration, bool) {
	if waited >= budget {
		return 0, false
	}
	return min(primaryRetryPause<<min(failed+int(waited/primaryRetryPause), 3), budget-waited), true
}

// sleep waits d on the client's clock; false if ctx ended first.
func (c *Client) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-c.clock.After(d):
		return true
	}
}
