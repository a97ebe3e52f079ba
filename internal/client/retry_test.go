package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/transport"
)

// TestRetryOfKeepsTheIdentityWhateverTheError is issue 28's double write:
// a retry of a write of unknown outcome that then finds no replica (or
// any other refusal before sending) must not say "never ran", or a loop
// re-passing its last error drops the identity and writes twice.
func TestRetryOfKeepsTheIdentityWhateverTheError(t *testing.T) {
	first := &nerr.UnknownOutcomeError{Identified: true, ClientID: "c1", Seq: 7, Cause: errors.New("connection reset")}
	for _, cause := range []error{
		fmt.Errorf("%w for list partition 0", nerr.ErrNoReplica),
		fmt.Errorf("%w %q", nerr.ErrUnknownService, "list"), // the yellow pages forgot a crashed cluster
		fmt.Errorf("%w 0 of service %q", nerr.ErrUnknownPartition, "list"),
		nerr.ErrNoPrimary,
		nerr.ErrOverloaded,
		nerr.ErrTooLarge,
	} {
		r := newRequest("list", 0, "append", []byte("x"), collect([]Option{WithRetryOf(first)}))
		err := r.outcome(cause)
		var u *nerr.UnknownOutcomeError
		if !errors.As(err, &u) || !u.Identified || u.ClientID != "c1" || u.Seq != 7 || !nerr.Retryable(err) {
			t.Fatalf("retry failing with %v returned %v, want an identified unknown outcome carrying c1/7", cause, err)
		}
		if !errors.Is(err, cause) {
			t.Errorf("%v: the cause is lost", err)
		}
		// The loop passes it on: the next retry carries the same identity.
		next := newRequest("list", 0, "append", []byte("x"), collect([]Option{WithRetryOf(err)}))
		if next.in.ClientId != "c1" || next.in.Seq != 7 || !next.maybeRan {
			t.Fatalf("retry of %v carries %q/%d", err, next.in.ClientId, next.in.Seq)
		}
	}
	// The handler's own answer is definite: the write ran.
	r := newRequest("list", 0, "append", []byte("x"), collect([]Option{WithRetryOf(first)}))
	remote := &transport.RemoteError{Node: "n1", Message: "full"}
	if err := r.outcome(remote); err != remote {
		t.Fatalf("handler error became %v", err)
	}
	// A first call refused before sending truthfully never ran.
	fresh := newRequest("list", 0, "append", []byte("x"), collect(nil))
	if err := fresh.outcome(nerr.ErrNoReplica); err != nerr.ErrNoReplica {
		t.Fatalf("unsent write: %v", err)
	}
	// An idempotency key and WithRetryOf: the key is the identity, and the
	// write may still have run.
	keyed := newRequest("list", 0, "append", []byte("x"), collect([]Option{WithIdempotencyKey("k"), WithRetryOf(first)}))
	if err := keyed.outcome(nerr.ErrNoReplica); !errors.Is(err, nerr.ErrUnknownOutcome) || keyed.in.IdempotencyKey != "k" || keyed.in.ClientId != "" {
		t.Fatalf("keyed retry: %v, identity %q/%q", err, keyed.in.IdempotencyKey, keyed.in.ClientId)
	}
}

// TestRetryPauses: pauses double from Backoff to MaxBackoff, each in the
// upper half of its step, never past the budget; off when Budget < 0.
func TestRetryPauses(t *testing.T) {
	p := config.DefaultRetryPolicy
	for _, tc := range []struct {
		n       int
		elapsed time.Duration
		u       float64
		want    time.Duration
		ok      bool
	}{
		{0, 0, 0, 25 * time.Millisecond, true},
		{0, 0, 0.999999, 50 * time.Millisecond, true},
		{2, 0, 0, 100 * time.Millisecond, true},
		{10, 0, 0, 500 * time.Millisecond, true},
		{63, 0, 0.5, 750 * time.Millisecond, true},
		{10, 9900 * time.Millisecond, 0, 100 * time.Millisecond, true},
		{0, 10 * time.Second, 0, 0, false},
	} {
		d, ok := pause(p, tc.n, tc.elapsed, tc.u)
		if ok != tc.ok || tc.ok && (d-tc.want).Abs() > time.Microsecond {
			t.Errorf("pause(%d, %v, %v) = %v %v, want %v %v", tc.n, tc.elapsed, tc.u, d, ok, tc.want, tc.ok)
		}
	}
	if _, ok := pause(config.NoRetry, 0, 0, 0); ok {
		t.Error("NoRetry retries")
	}
	if err := (config.RetryPolicy{Backoff: 2 * time.Second, MaxBackoff: time.Second}).Validate("ClientConfig.Retry"); err == nil {
		t.Error("Backoff above MaxBackoff accepted")
	}
}

// TestRetryingBoundsCallsWhileNoReplicaIsKnown: while the yellow pages
// know no replica every try fails at once; the policy spaces them, so an
// operation makes a bounded number of calls in its budget (the README loop
// made 40,000-100,000), and stops at the budget with the last error.
// Runs on a manual clock, with the shortest pauses the jitter allows.
func TestRetryingBoundsCallsWhileNoReplicaIsKnown(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	start := clk.Now()
	tries, retries := 0, 0
	var last time.Time
	noReplica := &nerr.UnknownOutcomeError{Identified: true, ClientID: "c", Seq: 1, Cause: nerr.ErrNoReplica}
	done := make(chan error, 1)
	go func() {
		_, err := retrying(context.Background(), clk, config.DefaultRetryPolicy, func() float64 { return 0 }, func() { retries++ },
			func() (struct{}, error) {
				tries++
				last = clk.Now()
				return struct{}{}, noReplica
			})
		done <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
wait:
	for {
		select {
		case err = <-done:
			break wait
		default:
		}
		bctx, bcancel := context.WithTimeout(ctx, 10*time.Millisecond)
		blocked := clk.BlockUntilContext(bctx, 1) == nil
		bcancel()
		if ctx.Err() != nil {
			t.Fatal("retrying did not end")
		}
		if blocked {
			clk.Advance(5 * time.Millisecond)
		}
	}
	if err != noReplica {
		t.Fatalf("ended with %v, want the last try's error", err)
	}
	// 25+50+100+200+400 ms, then 500 ms each: 24 tries in 10 s.
	if tries < 10 || tries > 25 || retries != tries-1 {
		t.Fatalf("%d tries (%d retries) in the 10 s budget, want 10-25", tries, retries)
	}
	if last.Sub(start) > config.DefaultRetryPolicy.Budget {
		t.Fatalf("a try started %v after the first, past the budget", last.Sub(start))
	}
	// A call that fails for good is not retried.
	n := 0
	_, err = retrying(context.Background(), clk, config.DefaultRetryPolicy, func() float64 { return 0 }, func() {},
		func() (struct{}, error) { n++; return struct{}{}, nerr.ErrUnknownService })
	if n != 1 || !errors.Is(err, nerr.ErrUnknownService) {
		t.Fatalf("a non-retryable error was tried %d times", n)
	}
	// A proxy's policy answers an overload at once but still retries a
	// failover.
	proxy := config.RetryPolicy{FailFastOnOverload: true}.WithDefaults()
	for _, tc := range []struct {
		err   error
		tries int
	}{{nerr.ErrOverloaded, 1}, {nerr.ErrNoPrimary, 2}} {
		n = 0
		_, err = retrying(context.Background(), clock.Real(), proxy, func() float64 { return 0 }, func() {},
			func() (struct{}, error) {
				if n++; n == 1 {
					return struct{}{}, tc.err
				}
				return struct{}{}, nil
			})
		if n != tc.tries {
			t.Errorf("FailFastOnOverload: %v tried %d times, want %d", tc.err, n, tc.tries)
		}
	}
	// A deadline the node reports (a hung handler) is not tried again,
	// though Retryable allows it; a write sent and cut off by one is.
	if retried(fmt.Errorf("%w: killed after 300ms", nerr.ErrDeadline)) {
		t.Error("the policy retries a handler's deadline")
	}
	if !retried(&nerr.UnknownOutcomeError{Identified: true, Cause: nerr.ErrDeadline}) || !retried(nerr.ErrOverloaded) || !retried(nerr.ErrClosed) {
		t.Error("the policy gives up on a retryable error")
	}
}
