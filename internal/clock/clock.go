// Package clock is the one time source of Neptune's shells (node runtime,
// replication loop, failure detection, membership expiry, poller, hedging):
// real time in production, a manually advanced clock in tests, so tests of
// timing behaviour advance time instead of sleeping.
//
// It is github.com/jonboulle/clockwork under Neptune's names: a well-kept
// fake clock with tickers, timers and BlockUntilContext (wait until the code
// under test is blocked on the clock), which a hand-written one lacked.
package clock

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"
)

// Clock is the time source a shell reads. Pure cores take time.Time values
// as inputs instead.
type Clock = clockwork.Clock

// Ticker and Timer are the clock's tickers and timers (read them with Chan).
type (
	Ticker = clockwork.Ticker
	Timer  = clockwork.Timer
)

// Manual is a clock that moves only when Advance is called; safe for
// concurrent use. BlockUntilContext(ctx, n) waits until n goroutines wait
// on it, so a test can advance exactly when the code is ready.
type Manual = clockwork.FakeClock

// Real returns the wall clock.
func Real() Clock { return clockwork.NewRealClock() }

// NewManual returns a manual clock set to start.
func NewManual(start time.Time) *Manual { return clockwork.NewFakeClockAt(start) }

// OrReal returns c, or the wall clock if c is nil: the default of every
// config's Clock field.
func OrReal(c Clock) Clock {
	if c == nil {
		return Real()
	}
	return c
}

// WithDeadline is context.WithDeadline on c: with a manual clock the
// context ends when the clock is advanced past t, not in real time.
func WithDeadline(parent context.Context, c Clock, t time.Time) (context.Context, context.CancelFunc) {
	return clockwork.WithDeadline(parent, c, t)
}

// WithTimeout is context.WithTimeout on c (see WithDeadline).
func WithTimeout(parent context.Context, c Clock, d time.Duration) (context.Context, context.CancelFunc) {
	return clockwork.WithTimeout(parent, c, d)
}
